"""``monitor worker``: the Kafka stream processor (settings: docs/worker.md)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from monitor.services.found import found_services
from monitor.worker.log_filters import quiet_timer_drift
from monitor.worker.settings import (
    SettingsError,
    checked,
    default_hint,
    describe,
    load_settings,
    refused,
    with_check,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor worker", description=__doc__,
        epilog="Settings come from --config (TOML) and MONITOR_* environment variables; see docs/worker.md.")
    parser.add_argument("--config", type=Path, help="TOML settings file (default: $MONITOR_CONFIG if set)")
    parser.add_argument("--processes", type=_count, default=1, metavar="N",
                        help="worker processes in the consumer group, on ports MONITOR_HTTP_PORT + 0..N-1 "
                             "(default 1; one per core on a host with cores to spare: docs/scaling.md)")
    return with_check(parser)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 256, got {text!r}")
    return value


def setup_logging(level: str) -> None:
    """The worker's log: ``level`` and up, one line per record, with Faust's timer drift notices (one per
    timer every ten minutes: :mod:`monitor.worker.log_filters`)."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_timer_drift()


def without_spinner(worker: Any) -> None:
    """No terminal spinner on Faust's worker. With one (Faust's default, whatever ``quiet`` says), the
    worker sets the root logger to DEBUG for the spinner's handler and keeps it so after startup: every
    ``log.debug`` of aiokafka and Faust then built a record in the hot path (about 1% of the CPU per
    message), only for handlers at ``level`` to drop it. Without it the root logger stays at ``level``."""
    worker.spinner = None


def tune_gc(threshold: int) -> None:
    """The garbage collector for a long-running worker: what was allocated up to now (the imports, the app)
    frozen out of every later collection (``gc.freeze``), and a young-generation collection once
    ``threshold`` more containers were allocated than freed instead of Python's 700 (0: Python's defaults).

    A batch decodes thousands of events (tuples, lists, structs), so with Python's default the collector ran
    a few times per batch and, every tenth of those, walked the whole heap of Faust and aiokafka too: 13%
    of the worker's CPU per message in the realistic world (docs/scaling.md, "What one message costs").
    The state has no reference cycles that matter: what a batch leaves is freed by reference counting, and
    the cycles the libraries make are still collected, only less often (a bounded amount of memory)."""
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(threshold, middle, oldest)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    services = found_services(os.environ)
    try:
        settings = load_settings(os.environ, args.config, services)
    except SettingsError as error:
        return refused("monitor worker", error)
    if args.check:
        return checked(describe(settings))
    if args.processes > 1:
        from monitor.worker.processes import pass_on_args, run_processes

        logging.basicConfig(level=settings.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return run_processes(args.processes, pass_on_args(argv), os.environ, settings.http_port)
    from faust.worker import Worker

    from monitor.worker.app import build
    from monitor.worker.topics import ensure_topics

    level = settings.log_level.upper()
    setup_logging(level)
    try:
        partitions = asyncio.run(ensure_topics(settings.kafka_bootstrap, settings.topics, settings.partitions,
                                               settings.replication_factor,
                                               security=settings.kafka_security()))
    except SettingsError as error:
        hint = default_hint(settings, "kafka_bootstrap", services)
        return refused("monitor worker", SettingsError(f"{error}{hint}"))
    if settings.event_loop == "uvloop":  # the policy Faust's worker gets its loop from (mode.loop)
        import mode.loop

        mode.loop.use("uvloop")
    runtime = build(replace(settings, partitions=partitions))
    tune_gc(settings.gc_threshold)
    logging.getLogger("monitor.worker").info("starting with %s", json.dumps(describe(settings)))
    worker = Worker(runtime.app, loglevel=level, quiet=True, redirect_stdouts=False)
    without_spinner(worker)
    try:
        worker.execute_from_commandline()
    except SystemExit as done:
        return int(done.code or 0)
    return 0
