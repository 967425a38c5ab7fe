"""``monitor annotate``: run the Label Studio bridge (settings from the environment; docs/annotate.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence

from monitor.worker.settings import SettingsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor annotate",
        description="Annotation requests into Label Studio tasks, Label Studio grades back into the "
                    "annotations topic. Settings: MONITOR_* environment variables (docs/annotate.md).",
    )
    parser.add_argument("--check", action="store_true",
                        help="validate the settings, print them (secrets hidden) and exit")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        from monitor.annotate.settings import describe, load_annotate_settings
    except ImportError as error:  # the optional extra is missing
        sys.stderr.write(f"monitor annotate: {error}; install it with pip install '.[annotate]'\n")
        return 2
    try:
        settings = load_annotate_settings(os.environ)
    except SettingsError as error:
        sys.stderr.write(f"monitor annotate: {error}\n")
        return 2
    if args.check:
        sys.stdout.write(json.dumps(describe(settings), indent=2, ensure_ascii=False) + "\n")
        return 0
    logging.basicConfig(level=settings.worker.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("monitor.annotate").info("starting with %s", json.dumps(describe(settings)))
    from monitor.annotate.app import run

    try:
        asyncio.run(run(settings))
    except KeyboardInterrupt:
        return 0
    return 0
