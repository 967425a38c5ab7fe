"""The ``monitor`` command line: one sub-command per job, each delegating to its own module."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from monitor import __version__

USAGE = """usage: monitor <command> [options]

commands:
  demo       simulated traffic through the pipeline in one process: live view, /metrics, canary verdict
  replay     the same pipeline over a JSONL file of events, ending with the demo's summary
  report     an HTML report with plots of a demo or replay run
  worker     the Kafka stream processor (faust-streaming) with Redis state and HTTP /metrics
  produce    simulated traffic written to the worker's Kafka topics (the compose traffic generator)
  canary     the current canary verdict per bucket and metric, read from Redis
  annotate   the Label Studio bridge: annotation requests into tasks, grades back into the stream
  evaluate   offline evaluation of TREC qrels/run files or JSONL impression sessions
  services   start, stop or inspect local Kafka, Redis, Prometheus and Alertmanager (up | down | status |
             install); worker, produce, canary and annotate find what `services up` runs

Run 'monitor <command> --help' for a command's options.
"""


def _delegate(module: str, environ: Mapping[str, str] | None = None) -> Callable[[Sequence[str]], int]:
    """A sub-command whose module is imported only when it runs (the worker's imports are heavy);
    ``environ``: defaults for environment variables that must be set before that import."""

    def run(argv: Sequence[str]) -> int:
        for name, value in (environ or {}).items():
            os.environ.setdefault(name, value)
        entry: Callable[[Sequence[str]], int] = importlib.import_module(module).main
        return entry(argv)

    return run


# monitor evaluate makes no BLAS call, and the worker only tiny ones (one process per core is how it scales);
# with one BLAS thread, importing numpy does not start a thread per core that spins for a while (50-90 ms
# of CPU on the 2-core machine, benchmarks/evaluate.py), nor competes with Redis and Kafka for the cores.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "demo": _delegate("monitor.demo.cli"),
    "replay": _delegate("monitor.demo.replay_cli"),
    "report": _delegate("monitor.demo.report_cli"),
    "worker": _delegate("monitor.worker.cli", ONE_BLAS_THREAD),
    "produce": _delegate("monitor.worker.produce"),
    "canary": _delegate("monitor.worker.canary_cli"),
    "annotate": _delegate("monitor.annotate.cli"),
    "evaluate": _delegate("monitor.offline.cli", ONE_BLAS_THREAD),
    "services": _delegate("monitor.services.cli"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        sys.stdout.write(USAGE)
        return 0
    if args[0] == "--version":
        sys.stdout.write(f"monitor {__version__}\n")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        sys.stderr.write(f"monitor: unknown command {args[0]!r}; accepted: {', '.join(sorted(COMMANDS))}\n")
        return 2
    return command(args[1:])
