"""``monitor annotate``: run the Label Studio bridge (settings from the environment; docs/annotate.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence

from monitor.services.found import found_services
from monitor.worker.settings import SettingsError, checked, refused, with_check


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor annotate",
        description="Annotation requests into Label Studio tasks, Label Studio grades back into the "
                    "annotations topic. Settings: MONITOR_* environment variables (docs/annotate.md).",
    )
    return with_check(parser)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        from monitor.annotate.settings import describe, load_annotate_settings
    except ImportError as error:  # the optional extra is missing
        sys.stderr.write(f"monitor annotate: {error}; install it with pip install '.[annotate]'\n")
        return 2
    try:
        settings = load_annotate_settings(os.environ, found_services(os.environ))
    except SettingsError as error:
        return refused("monitor annotate", error)
    if args.check:
        return checked(describe(settings))
    logging.basicConfig(level=settings.worker.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("monitor.annotate").info("starting with %s", json.dumps(describe(settings)))
    from monitor.annotate.app import run

    try:
        asyncio.run(run(settings))
    except KeyboardInterrupt:
        return 0
    return 0
