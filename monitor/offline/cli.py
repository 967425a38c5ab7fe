"""``monitor evaluate``: offline evaluation of TREC qrels/run files or JSONL impression sessions; given
two or more runs, each run after the first is compared with it (the baseline) by paired tests."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from monitor.core.batch import evaluate_batch
from monitor.core.errors import MonitorError
from monitor.core.grades import parse_scale
from monitor.core.measures import Measure, accepted_measures, parse_measure
from monitor.core.paired import CORRECTIONS, DEFAULT_ITERATIONS
from monitor.core.ranked_batch import RankedBatch
from monitor.core.run_comparison import TESTS, CompareSettings, compare_runs
from monitor.extras import missing_extra
from monitor.offline.compare_output import render_comparison
from monitor.offline.errors import InputError
from monitor.offline.no_huge_pages import normal_pages
from monitor.offline.output import render
from monitor.offline.progress import Progress

DEFAULT_TREC_MEASURES = ("nDCG@10", "P@10", "AP", "RR")
DEFAULT_SESSION_MEASURES = ("DCG@20", "nDCG@20", "PNR", "P@10")
DEAD_LETTERS_SHOWN = 10  # invalid session events named on stderr, each as FILE:LINE: code: reason

EPILOG = f"""measures: {accepted_measures()}

Defaults follow trec_eval: documents of a query ordered by score descending, then document id
descending; queries missing from the run are ignored (see --complete); NDCG's ideal comes from every
judged document of the query; relevant means grade >= 1 on the trec scale. See docs/evaluate.md.

TREC files are read with pyarrow: pip install 'search-relevance-monitor[offline]' (--sessions needs no
extra).

comparing runs: monitor evaluate QRELS BASELINE RUN [RUN ...] compares each RUN with BASELINE per
measure over the queries evaluated in every run (with --complete: every judged query, missing ones 0):
mean, difference, relative difference, its confidence interval, the paired t-test's and the randomization
test's p-values, and * where the chosen --test is below --alpha. See docs/evaluate.md, "Comparing runs"."""

COMPARE_OPTIONS = ("alpha", "test", "correction", "iterations", "seed")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor evaluate", description=__doc__, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("qrels", nargs="?", type=Path, help="TREC qrels file: qid iter docno grade")
    parser.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                        help="TREC run file: qid Q0 docno rank score tag; with two or more, the first is the "
                             "baseline the others are compared with")
    parser.add_argument("--sessions", nargs="+", type=Path, metavar="JSONL",
                        help="JSONL files of impression and annotation events instead of qrels/run")
    parser.add_argument("-m", "--measure", action="append", dest="measures", metavar="MEASURE",
                        help="a measure such as nDCG@10, P@5, AP, RBP(p=0.8), PNR (repeatable)")
    parser.add_argument("--scale", default=None,
                        help="grade scale: 'trec[:N]' (default for qrels), 'four-level' (高/中/低/无, "
                             "default for sessions; alias 'seed') or 'name=gain,...@lowest_relevant'")
    parser.add_argument("--per-query", action="store_true", help="also print each query's values")
    parser.add_argument("--complete", action="store_true",
                        help="like trec_eval -c: judged queries missing from the run count, with value 0")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="output format (default table)")
    parser.add_argument("--digits", type=int, default=4, help="decimals in the table (default 4)")
    compare = parser.add_argument_group("comparing runs (QRELS BASELINE RUN [RUN ...])")
    compare.add_argument("--alpha", type=float, default=None,
                         help="significance level; intervals are at 1 - alpha (default 0.05: 95%%)")
    compare.add_argument("--test", choices=TESTS, default=None,
                         help="the test whose p-value marks a difference significant (default t, the paired "
                              "t-test; both p-values are printed)")
    compare.add_argument("--correction", choices=CORRECTIONS, default=None,
                         help="adjust p-values over the runs compared with the baseline (default none)")
    compare.add_argument("--iterations", type=int, default=None,
                         help=f"random sign flips of the randomization test (default {DEFAULT_ITERATIONS})")
    compare.add_argument("--seed", type=int, default=None, help="seed of the sign flips (default 0)")
    return parser


def _fail(message: str) -> int:
    sys.stderr.write(f"monitor evaluate: error: {message}\n")
    return 2


def _trec_batches(args: argparse.Namespace, progress: Progress) -> list[RankedBatch]:
    """One batch per run, each joined with the qrels (read once)."""
    # pyarrow (the [offline] extra) is imported here, once main has checked it is installed.
    from monitor.offline.trec import check_judged_once, read_qrels, read_run
    from monitor.offline.trec_batch import batch_from_trec

    scale = parse_scale(args.scale or "trec")
    progress.step(f"reading {args.qrels.name}")
    qrels = read_qrels(args.qrels, scale)
    batches = []
    for path in args.runs:
        progress.step(f"reading {path.name}")
        try:
            run = read_run(path)
        except InputError:
            check_judged_once(qrels)  # a qrels repeat is reported before any run error, as ever
            raise
        progress.step(f"joining {path.name} and qrels")
        batches.append(batch_from_trec(run, qrels, complete=args.complete))
    return batches


def _session_batch(args: argparse.Namespace, progress: Progress) -> RankedBatch:
    from monitor.offline.sessions import judged_sessions, read_sessions

    scale = parse_scale(args.scale or "four-level")
    progress.step("reading sessions")
    data = read_sessions(list(args.sessions), scale, now=time.time())
    progress.step("joining labels")
    keys, lists, max_level = judged_sessions(data, scale)
    progress.step("building lists")
    if data.dead_letters:
        counts = Counter(d.error.code for d in data.dead_letters)
        sys.stderr.write(f"monitor evaluate: {len(data.dead_letters):,} invalid event(s) left out as dead "
                         "letters (" + ", ".join(f"{code} {n}" for code, n in counts.most_common()) + "):\n")
        for letter in data.dead_letters[:DEAD_LETTERS_SHOWN]:
            sys.stderr.write(f"  {letter}\n")
        if len(data.dead_letters) > DEAD_LETTERS_SHOWN:
            sys.stderr.write(f"  … and {len(data.dead_letters) - DEAD_LETTERS_SHOWN:,} more\n")
    if data.unlabelled:
        sys.stderr.write(f"monitor evaluate: {data.unlabelled} session(s) without any label left out\n")
    return RankedBatch.from_lists(keys, lists, max_level)


def _run_names(paths: Sequence[Path]) -> list[str] | None:
    """Each run's name in the output: its file name, or the path as given where two names clash; None if
    a path is given twice."""
    if len({str(p) for p in paths}) < len(paths):
        return None
    names = [p.name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, if anything."""
    sessions_mode = args.sessions is not None
    if sessions_mode and (args.qrels or args.runs):
        return "give either QRELS RUN or --sessions, not both"
    if not sessions_mode and (args.qrels is None or not args.runs):
        return "give QRELS and RUN files, or --sessions JSONL..."
    given = [f"--{name}" for name in COMPARE_OPTIONS if getattr(args, name) is not None]
    if len(args.runs) < 2 and given:
        return f"{', '.join(given)}: for comparing runs, give QRELS BASELINE RUN [RUN ...]"
    if len(args.runs) > 1 and args.per_query:
        return "--per-query prints one run's values: evaluate each run on its own"
    if len(args.runs) > 1 and _run_names(args.runs) is None:
        return "a run file is given twice"
    if not sessions_mode and (missing := missing_extra("pyarrow", "offline", "monitor evaluate QRELS RUN")):
        return f"{missing} (--sessions works without it)"
    for path in args.sessions or [args.qrels, *args.runs]:
        if not path.is_file():
            return f"{path}: no such file"
    return None


def _settings(args: argparse.Namespace) -> CompareSettings:
    given = {name: getattr(args, name) for name in COMPARE_OPTIONS if getattr(args, name) is not None}
    return CompareSettings(**given)


def _compare(args: argparse.Namespace) -> int:
    """``monitor evaluate QRELS BASELINE RUN [RUN ...]``."""
    names = _run_names(args.runs) or []
    try:
        settings = _settings(args)
    except ValueError as error:
        return _fail(str(error))
    try:
        measures: list[Measure] = list(dict.fromkeys(parse_measure(m) for m in
                                                     (args.measures or DEFAULT_TREC_MEASURES)))
        progress = Progress(total=2 + 2 * len(args.runs))
        with normal_pages():
            batches = _trec_batches(args, progress)
            progress.step("comparing runs")
            comparison = compare_runs(measures, dict(zip(names, batches, strict=True)), settings)
        progress.done()
    except MonitorError as error:
        return _fail(str(error))
    if comparison.queries == 0:
        return _fail("no judged query is in every run: nothing to compare (--complete counts a judged "
                     "query missing from a run as 0)")
    for name, missing in comparison.missing.items():
        if missing:
            queries = "query" if missing == 1 else "queries"
            sys.stderr.write(f"monitor evaluate: {name} lacks {missing} judged {queries} evaluated in "
                             "another run, left out of the comparison (--complete counts a judged query "
                             "missing from a run as 0)\n")
    sys.stdout.write(render_comparison(args.format, comparison, args.digits))
    return 0


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if (problem := _check(args)) is not None:
        return _fail(problem)
    if len(args.runs) > 1:
        return _compare(args)
    sessions_mode = args.sessions is not None
    try:
        defaults = DEFAULT_SESSION_MEASURES if sessions_mode else DEFAULT_TREC_MEASURES
        measures: list[Measure] = list(dict.fromkeys(parse_measure(m) for m in (args.measures or defaults)))
        progress = Progress(total=3 + len(measures))
        with normal_pages():  # monitor/offline/no_huge_pages.py: huge-page faults cost more than they save
            batch = _session_batch(args, progress) if sessions_mode else _trec_batches(args, progress)[0]
            for measure in measures:
                progress.step(f"computing {measure}")
            aggregate, per_list = evaluate_batch(measures, batch)
        progress.done()
    except MonitorError as error:
        return _fail(str(error))
    per_query = None
    if args.per_query:
        per_query = {key: {m: per_list[m][g] for m in measures} for g, key in enumerate(batch.keys)}
    sys.stdout.write(render(args.format, measures, aggregate, per_query, args.digits))
    return 0
