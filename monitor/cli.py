"""The ``monitor`` command line: one sub-command per job, each delegating to its own module."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from monitor import __version__

USAGE = """usage: monitor <command> [options]

commands:
  evaluate   offline evaluation of TREC qrels/run files or JSONL impression sessions
  services   start, stop or inspect local Kafka, Redis, Prometheus and Alertmanager (up | down | status)

Run 'monitor <command> --help' for a command's options.
"""


def _evaluate(argv: Sequence[str]) -> int:
    from monitor.offline.cli import main as evaluate_main

    return evaluate_main(argv)


def _services(argv: Sequence[str]) -> int:
    from monitor.services.cli import main as services_main

    return services_main(argv)


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "evaluate": _evaluate,
    "services": _services,
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
