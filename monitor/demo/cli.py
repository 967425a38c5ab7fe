"""``monitor demo``: simulated search traffic through the stream core in one process (no Kafka, no Redis).

Serves /metrics on 127.0.0.1, draws a live view of rolling DCG@k and PNR per bucket and arm with the
canary verdict, fires the regression alert (printed, and posted to Alertmanager with --alertmanager),
and ends with a summary. See docs/demo.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from monitor.core.stream.config import BUDGET_UNITS
from monitor.demo.settings import DEFAULT_DURATION, DEFAULT_HOURS, DEFAULT_SESSIONS, DemoSettings
from monitor.sim.config import REGRESSION_BUCKETS


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    """``--budget`` and ``--budget-unit``, shared by ``monitor demo`` and ``monitor replay``."""
    parser.add_argument("--budget", type=float, metavar="N",
                        help="annotation budget per bucket per hour of event time (default 2,000)")
    parser.add_argument("--budget-unit", choices=BUDGET_UNITS, default="sessions",
                        help="what the budget counts: sampled sessions, or judgments (documents "
                             "requested from annotators); default sessions. See docs/worker.md")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION, metavar="SECONDS",
                        help=f"wall seconds to play the traffic in (default {DEFAULT_DURATION:g}); the "
                             "event time it spans is --hours (unlike `monitor produce --duration`, which is "
                             "event time)")
    parser.add_argument("--hours", type=float, default=DEFAULT_HOURS,
                        help=f"hours of simulated event time (default {DEFAULT_HOURS:g})")
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS,
                        help=f"impression sessions in the run (default {DEFAULT_SESSIONS:,})")
    parser.add_argument("--seed", type=int, default=1, help="simulator seed (default 1)")
    parser.add_argument("--regression", type=float, default=0.10, metavar="FRACTION",
                        help="the canary's relative DCG@k loss, 0 for a healthy canary (default 0.10)")
    parser.add_argument("--bucket", choices=REGRESSION_BUCKETS, default="tail",
                        help="where the canary regresses (default tail)")
    parser.add_argument("--invalid-rate", type=float, default=0.001, metavar="FRACTION",
                        help="share of malformed events, to show dead letters (default 0.001)")
    parser.add_argument("--forever", action="store_true",
                        help="repeat the run (new seed, next hours) until Ctrl-C")
    parser.add_argument("--fast", action="store_true",
                        help="no pacing: play as fast as the CPU allows (same numbers and alerts)")
    parser.add_argument("--port", type=int, default=9464,
                        help="port of /metrics on 127.0.0.1 (default 9464; 0 picks a free one)")
    parser.add_argument("--alertmanager", metavar="URL",
                        help="also post alerts to this Alertmanager (e.g. http://127.0.0.1:9093)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON (live view on stderr)")
    parser.add_argument("--write-events", type=Path, metavar="FILE",
                        help="write the simulated stream as JSONL (input of monitor replay)")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="write the run's time series (input of monitor report)")
    parser.add_argument("--shadow", action="store_true",
                        help="add a shadow candidate (ranker-c, 10%% worse in the tail) to every impression, "
                             "judged against the served lists of the same sessions")
    add_budget_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from monitor.demo import verdict_rows
    from monitor.demo.demo import DemoOptions, run_demo

    try:
        settings = DemoSettings(duration=args.duration, hours=args.hours, sessions=args.sessions,
                                seed=args.seed, regression=args.regression, bucket=args.bucket,
                                invalid_rate=args.invalid_rate, forever=args.forever, budget=args.budget,
                                budget_unit=args.budget_unit, shadow=args.shadow)
        client = verdict_rows.alertmanager_client(args.alertmanager) if args.alertmanager else None
        for option, path in (("--write-events", args.write_events), ("--record", args.record)):
            if path is not None and not path.resolve().parent.is_dir():
                raise ValueError(f"{option}: the folder of {path} does not exist")
    except ValueError as error:
        sys.stderr.write(f"monitor demo: error: {error}\n")
        return 2
    options = DemoOptions(settings, port=args.port, alertmanager=args.alertmanager, as_json=args.json,
                          write_events=args.write_events, record=args.record, fast=args.fast)
    try:
        run_demo(options, sys.stdout, sys.stderr, verdict_rows.make_judge(),
                 collectors=verdict_rows.collectors, alertmanager=client)
    except OSError as error:
        sys.stderr.write(f"monitor demo: error: {error}\n")
        return 1
    return 0
