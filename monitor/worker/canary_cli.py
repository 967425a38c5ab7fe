"""``monitor canary``: the current canary verdict per bucket and metric, read from the worker's Redis.

Reads the same state and settings as ``monitor worker`` (``--config`` / ``MONITOR_*``): the rollup the
workers export (one Redis read), so it shows what they export; when there is no fresh rollup (no worker
running, or none with these settings) or with ``--direct``, it computes the verdicts from the partitions
as the exporter would, and says so on stderr. Exit status: 0 when no comparison shown is a regression, 1
when one is, 2 on a bad setting or when no comparison matches (so a release script can gate on it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.core.canary import Comparison
from monitor.worker.settings import SettingsError, load_settings, refused


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor canary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", help="the new ranker (default: every candidate)")
    parser.add_argument("--baseline", help="the ranker it is compared with (default: every baseline)")
    parser.add_argument("--kind", choices=["canary", "deploy"], help="canary vs control, or after vs before")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--direct", action="store_true",
                        help="compute the verdicts from the partitions now instead of reading the workers' "
                             "rollup")
    parser.add_argument("--config", type=Path, help="the worker's TOML settings file")
    return parser


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def row(c: Comparison) -> dict[str, Any]:
    v = c.verdict
    return {"bucket": c.bucket, "metric": c.metric, "kind": c.kind, "candidate": c.candidate,
            "baseline": c.baseline, "verdict": v.verdict, "estimate": v.estimate, "lower": v.lower,
            "upper": v.upper, "evidence": v.evidence, "n_baseline": v.n_baseline,
            "n_candidate": v.n_candidate, "reason": v.reason, "changes": v.changes,
            "changed_at": v.changed_at, "resets": v.resets, "adjusted": v.adjusted}


def table(rows: Sequence[Comparison]) -> str:
    head = ["bucket", "metric", "kind", "candidate", "baseline", "verdict", "change", "interval", "sessions",
            "adjusted"]
    lines = [[c.bucket, c.metric, c.kind, c.candidate, c.baseline, c.verdict.verdict,
              _pct(c.verdict.estimate), f"{_pct(c.verdict.lower)} … {_pct(c.verdict.upper)}",
              f"{c.verdict.n_candidate} vs {c.verdict.n_baseline}",
              "—" if c.verdict.adjusted is None else f"{c.verdict.adjusted:.0%}"] for c in rows]
    widths = [max(len(str(x)) for x in column) for column in zip(head, *lines, strict=True)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
                     for line in [head, *lines]) + "\n"


async def fetch(settings: Any, direct: bool = False) -> list[Comparison]:
    import time

    from monitor.pipeline.client import connect
    from monitor.pipeline.writer import RedisState
    from monitor.worker.canary import current
    from monitor.worker.exporter import Exporter

    redis = connect(settings.redis_url, socket_connect_timeout=5, socket_timeout=30,
                    **settings.redis_options())
    try:
        state = RedisState(redis, settings.stream, settings.grade_scale(), settings.partitions,
                           prefix=settings.redis_prefix)
        if not direct:
            rollup = await Exporter(state, settings.canary(), settings.rollup_interval).read()
            if rollup is not None and not rollup.stale(time.time()):
                return list(rollup.shared.verdicts.comparisons)
            sys.stderr.write("monitor canary: no fresh rollup in Redis (no worker running with these "
                             "settings?): verdicts computed from the partitions\n")
        return (await current(state, settings.canary())).comparisons
    finally:
        await redis.aclose()


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        settings = load_settings(os.environ, args.config)
    except SettingsError as error:
        return refused("monitor canary", error)
    try:
        found = asyncio.run(fetch(settings, args.direct))
    except OSError as error:
        sys.stderr.write(f"monitor canary: cannot read Redis ({error})\n")
        return 2
    except Exception as error:  # redis-py's connection errors are not OSErrors
        sys.stderr.write(f"monitor canary: cannot read Redis ({type(error).__name__}: {error})\n")
        return 2
    shown = [c for c in found if (args.candidate is None or c.candidate == args.candidate)
             and (args.baseline is None or c.baseline == args.baseline)
             and (args.kind is None or c.kind == args.kind)]
    if not shown:
        what = ", ".join(f"{k}={v}" for k, v in (("candidate", args.candidate), ("baseline", args.baseline),
                                                  ("kind", args.kind)) if v)
        sys.stderr.write(f"monitor canary: no comparison{' for ' + what if what else ''} "
                         f"(comparisons now: {sorted({(c.candidate, c.baseline) for c in found})})\n")
        return 2
    if args.json:
        sys.stdout.write(json.dumps([row(c) for c in shown], indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(table(shown))
    return 1 if any(c.verdict.verdict == "regression" for c in shown) else 0
