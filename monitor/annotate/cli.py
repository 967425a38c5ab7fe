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

ENVIRONMENT = """\
environment (docs/annotate.md has the table):
  required:
    MONITOR_LABEL_STUDIO_URL             Label Studio's base URL (`monitor services up --only label-studio`:
                                         http://127.0.0.1:18080)
    MONITOR_LABEL_STUDIO_TOKEN           a personal access token of the account the bridge acts as,
      or MONITOR_LABEL_STUDIO_TOKEN_FILE a file holding it (.services/label-studio/personal-access-token)
    MONITOR_ANNOTATE_SECRET              the shared secret of Label Studio's webhooks (any random string),
      or MONITOR_ANNOTATE_SECRET_FILE    a file holding it
  optional:
    MONITOR_ANNOTATE_HOST, MONITOR_ANNOTATE_PORT   where the webhook and /metrics listen (127.0.0.1:9465)
    MONITOR_ANNOTATE_WEBHOOK_URL         the URL Label Studio calls (http://HOST:PORT/webhook)
    MONITOR_ANNOTATE_PROJECT             the project's title (Search relevance)
    MONITOR_ANNOTATE_DOC_URL, MONITOR_ANNOTATE_DOCUMENTS   a URL template for documents, a JSONL of them
    MONITOR_ANNOTATE_RECONCILE_INTERVAL  seconds between reconciliations with Label Studio (300)
    MONITOR_ANNOTATE_SCOPE               query (default) or session
    MONITOR_ANNOTATE_IMPORT_SIZE         tasks per bulk import request to Label Studio (500)
  rater quality (docs/annotate.md, "Rater quality"):
    MONITOR_ANNOTATE_OVERLAP             share of pairs sent to two annotators (0.1)
    MONITOR_ANNOTATE_GOLD                a JSONL file of gold pairs {"query", "doc_id", "grade"}
    MONITOR_ANNOTATE_GOLD_SHARE          share of tasks that are gold, with a gold file (0.05)
    MONITOR_ANNOTATE_AGREEMENT           thresholds: alpha=0.667,kappa=0.5,gold=0.5,min_units=50,
                                         min_pairs=50,min_gold=20 (any subset)
    MONITOR_ANNOTATE_AGREEMENT_WINDOW    seconds of grades agreement is measured over (86400)
    MONITOR_ANNOTATE_ANNOTATOR_SALT      key of the hashed annotator labels (none),
      or MONITOR_ANNOTATE_ANNOTATOR_SALT_FILE  a file holding it
    MONITOR_ANNOTATE_MAX_ANNOTATORS      annotators with a label of their own; the rest are other (20)
  Kafka, Redis, topics and the app id are the worker's (MONITOR_CONFIG and MONITOR_* of docs/worker.md):
  MONITOR_KAFKA_BOOTSTRAP and MONITOR_REDIS_URL default to what `monitor services up` runs.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor annotate",
        description="Annotation requests into Label Studio tasks, Label Studio grades back into the "
                    "annotations topic. Settings: MONITOR_* environment variables (docs/annotate.md).",
        epilog=ENVIRONMENT, formatter_class=argparse.RawDescriptionHelpFormatter,
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
