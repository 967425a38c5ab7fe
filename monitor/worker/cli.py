"""``monitor worker``: the Kafka stream processor (settings: docs/worker.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from monitor.worker.settings import SettingsError, checked, describe, load_settings, refused, with_check


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor worker", description=__doc__,
        epilog="Settings come from --config (TOML) and MONITOR_* environment variables; see docs/worker.md.")
    parser.add_argument("--config", type=Path, help="TOML settings file (default: $MONITOR_CONFIG if set)")
    return with_check(parser)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        settings = load_settings(os.environ, args.config)
    except SettingsError as error:
        return refused("monitor worker", error)
    if args.check:
        return checked(describe(settings))
    from faust.worker import Worker

    from monitor.worker.app import build
    from monitor.worker.topics import ensure_topics

    level = settings.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        partitions = asyncio.run(ensure_topics(settings.kafka_bootstrap, settings.topics, settings.partitions,
                                               settings.replication_factor,
                                               security=settings.kafka_security()))
    except SettingsError as error:
        return refused("monitor worker", error)
    runtime = build(replace(settings, partitions=partitions))
    logging.getLogger("monitor.worker").info("starting with %s", json.dumps(describe(settings)))
    worker = Worker(runtime.app, loglevel=level, quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as done:
        return int(done.code or 0)
    return 0
