"""``monitor evaluate``: offline evaluation of TREC qrels/run files or JSONL impression sessions."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from monitor.core.batch import evaluate_batch
from monitor.core.errors import MonitorError
from monitor.core.grades import parse_scale
from monitor.core.measures import Measure, accepted_measures, parse_measure
from monitor.core.ranked_batch import RankedBatch
from monitor.extras import missing_extra
from monitor.offline.errors import InputError
from monitor.offline.no_huge_pages import normal_pages
from monitor.offline.output import render
from monitor.offline.progress import Progress

DEFAULT_TREC_MEASURES = ("nDCG@10", "P@10", "AP", "RR")
DEFAULT_SESSION_MEASURES = ("DCG@20", "nDCG@20", "PNR", "P@10")

EPILOG = f"""measures: {accepted_measures()}

Defaults follow trec_eval: documents of a query ordered by score descending, then document id
descending; queries missing from the run are ignored (see --complete); NDCG's ideal comes from every
judged document of the query; relevant means grade >= 1 on the trec scale. See docs/evaluate.md.

TREC files are read with pyarrow: pip install 'search-relevance-monitor[offline]' (--sessions needs no
extra)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor evaluate", description=__doc__, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("qrels", nargs="?", type=Path, help="TREC qrels file: qid iter docno grade")
    parser.add_argument("run", nargs="?", type=Path, help="TREC run file: qid Q0 docno rank score tag")
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
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--digits", type=int, default=4, help="decimals in the table (default 4)")
    return parser


def _fail(message: str) -> int:
    sys.stderr.write(f"monitor evaluate: error: {message}\n")
    return 2


def _trec_batch(args: argparse.Namespace, progress: Progress) -> RankedBatch:
    # pyarrow (the [offline] extra) is imported here, once main has checked it is installed.
    from monitor.offline.trec import check_judged_once, read_qrels, read_run
    from monitor.offline.trec_batch import batch_from_trec

    scale = parse_scale(args.scale or "trec")
    progress.step(f"reading {args.qrels.name}")
    qrels = read_qrels(args.qrels, scale)
    progress.step(f"reading {args.run.name}")
    try:
        run = read_run(args.run)
    except InputError:
        check_judged_once(qrels)  # a qrels repeat is reported before any run error, as ever
        raise
    progress.step("joining run and qrels")
    return batch_from_trec(run, qrels, complete=args.complete)


def _session_batch(args: argparse.Namespace, progress: Progress) -> RankedBatch:
    from monitor.offline.sessions import judged_sessions, read_sessions

    scale = parse_scale(args.scale or "four-level")
    progress.step("reading sessions")
    data = read_sessions(list(args.sessions), scale)
    progress.step("joining labels")
    keys, lists, max_level = judged_sessions(data, scale)
    progress.step("building lists")
    if data.unlabelled:
        sys.stderr.write(f"monitor evaluate: {data.unlabelled} session(s) without any label left out\n")
    return RankedBatch.from_lists(keys, lists, max_level)


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    sessions_mode = args.sessions is not None
    if sessions_mode and (args.qrels or args.run):
        return _fail("give either QRELS RUN or --sessions, not both")
    if not sessions_mode and (args.qrels is None or args.run is None):
        return _fail("give QRELS and RUN files, or --sessions JSONL...")
    if not sessions_mode and (missing := missing_extra("pyarrow", "offline", "monitor evaluate QRELS RUN")):
        return _fail(f"{missing} (--sessions works without it)")
    for path in args.sessions or [args.qrels, args.run]:
        if not path.is_file():
            return _fail(f"{path}: no such file")
    try:
        defaults = DEFAULT_SESSION_MEASURES if sessions_mode else DEFAULT_TREC_MEASURES
        measures: list[Measure] = list(dict.fromkeys(parse_measure(m) for m in (args.measures or defaults)))
        progress = Progress(total=3 + len(measures))
        with normal_pages():  # monitor/offline/no_huge_pages.py: huge-page faults cost more than they save
            batch = _session_batch(args, progress) if sessions_mode else _trec_batch(args, progress)
            for measure in measures:
                progress.step(f"computing {measure}")
            aggregate, per_list = evaluate_batch(measures, batch)
        progress.done()
    except InputError as error:
        return _fail(str(error))
    except MonitorError as error:
        return _fail(str(error))
    per_query = None
    if args.per_query:
        per_query = {key: {m: per_list[m][g] for m in measures} for g, key in enumerate(batch.keys)}
    sys.stdout.write(render(args.format, measures, aggregate, per_query, args.digits))
    return 0
