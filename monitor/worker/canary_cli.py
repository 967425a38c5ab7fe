"""``monitor canary``: the current canary verdict per bucket and metric, read from the worker's Redis.

Reads the same state and settings as ``monitor worker`` (``--config`` / ``MONITOR_*``): the rollup the
workers export (one Redis read), so it shows what they export; when there is no fresh rollup (no worker
running, or none with these settings) or with ``--direct``, it computes the verdicts from the partitions
as the exporter would, and says so on stderr. Exit status: 0 when no comparison shown is a regression, 1
when one is, 2 on a bad setting or when no comparison matches (so a release script can gate on it).

The table gives each pair's metrics, then its ``overall`` verdict (regression if any metric regressed,
pass only if every one passed); ``checks`` says which checks ran and what they found (``SRM −9.6%``: the
canary's share of impressions is 9.6% below the declared one; ``imbalance −4.8%``: the arms' queries
differ, the DCG verdict is not adjusted; ``ratio ok``, ``balance ok``; ``ratio n/a``, ``balance n/a``: the
check does not apply), and a verdict that cannot be trusted (a sample-ratio mismatch) reads ``(untrusted)``.
A shadow candidate (kind ``shadow``, :mod:`monitor.core.canary.shadow`) is compared with the lists served
to the same sessions: baseline ``served``, its sessions both arms' count. The details of a flagged check
follow the table.
``--json`` gives one object per comparison with its reason, ``trusted``, ``checks`` (each with its
numbers and ``detail``; ``"applicable": false`` on a check that does not apply) and its pair's ``overall``
verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from monitor.core.canary import KINDS, Check, Comparison, Overall, overall
from monitor.core.canary.alerts import check_note
from monitor.services.found import found_services
from monitor.worker.settings import SettingsError, default_hint, load_settings, refused

ENVIRONMENT = """\
environment: the worker's settings (docs/worker.md), so that it reads what the workers wrote:
  MONITOR_REDIS_URL          the workers' Redis (default: the Redis `monitor services up` runs, else
                             redis://127.0.0.1:6379/0); MONITOR_REDIS_PASSWORD(_FILE) and
                             MONITOR_REDIS_SSL_CAFILE/_CERTFILE/_KEYFILE for a secured one
  MONITOR_REDIS_PREFIX       the workers' key prefix (srm)
  MONITOR_REDIS_GROUPS       the workers' number of partition groups (4)
  MONITOR_CONFIG (or --config), MONITOR_CANARY_*, MONITOR_SCALE   the workers' stream and canary settings:
                             the rollup is read under a fingerprint of them (other settings: computed
                             from the partitions, as --direct)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monitor canary", description=__doc__, epilog=ENVIRONMENT,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", help="the new ranker (default: every candidate)")
    parser.add_argument("--baseline", help="the ranker it is compared with (default: every baseline)")
    parser.add_argument("--kind", choices=list(KINDS),
                        help="canary vs control, after vs before a deploy, or shadow vs served lists")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--direct", action="store_true",
                        help="compute the verdicts from the partitions now instead of reading the workers' "
                             "rollup")
    parser.add_argument("--config", type=Path, help="the worker's TOML settings file")
    return parser


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def check_json(check: Check) -> dict[str, Any]:
    return {"name": check.name, "flagged": check.flagged, "note": check_note(check),
            "estimate": check.estimate, "lower": check.lower, "upper": check.upper,
            "evidence": check.evidence, "expected": check.expected, "detail": check.detail,
            **({} if check.applicable else {"applicable": False})}


def overall_json(o: Overall) -> dict[str, Any]:
    return {"verdict": o.verdict, "reason": o.reason, "trusted": o.trusted, "n_baseline": o.n_baseline,
            "n_candidate": o.n_candidate}


PairKey = tuple[str, str, str, str]


def pair_of(c: Comparison | Overall) -> PairKey:
    return c.bucket, c.kind, c.baseline, c.candidate


def row(c: Comparison, whole: Overall | None = None) -> dict[str, Any]:
    """One comparison as JSON, with its pair's overall verdict (``whole``) when given."""
    v = c.verdict
    out: dict[str, Any] = {"bucket": c.bucket, "metric": c.metric, "kind": c.kind, "candidate": c.candidate,
           "baseline": c.baseline, "verdict": v.verdict, "estimate": v.estimate, "lower": v.lower,
           "upper": v.upper, "evidence": v.evidence, "n_baseline": v.n_baseline,
           "n_candidate": v.n_candidate, "reason": v.reason, "changes": v.changes,
           "changed_at": v.changed_at, "resets": v.resets, "adjusted": v.adjusted, "trusted": v.trusted,
           "checks": [check_json(check) for check in v.checks]}
    if whole is not None:
        out["overall"] = overall_json(whole)
    return out


def rows(found: Sequence[Comparison]) -> list[dict[str, Any]]:
    """``--json``: every comparison with its pair's overall verdict."""
    wholes = {pair_of(o): o for o in overall(found)}
    return [row(c, wholes.get(pair_of(c))) for c in found]


def pair_checks(found: Sequence[Comparison]) -> dict[PairKey, list[Check]]:
    """Each pair's checks, once each (a sample-ratio check is on every metric of its pair)."""
    out: dict[PairKey, dict[str, Check]] = {}
    for c in found:
        for check in c.verdict.checks:
            out.setdefault(pair_of(c), {}).setdefault(check.name, check)
    return {key: list(checks.values()) for key, checks in out.items()}


def _verdict(name: str, trusted: bool) -> str:
    return name if trusted else f"{name} (untrusted)"


def _notes(checks: Sequence[Check]) -> str:
    return ", ".join(check_note(check) for check in checks) or "—"


def table(found: Sequence[Comparison]) -> str:
    """The comparisons, each pair's ``overall`` row after its metrics, and the flagged checks' details."""
    head = ["bucket", "metric", "kind", "candidate", "baseline", "verdict", "change", "interval", "sessions",
            "adjusted", "checks"]
    checks = pair_checks(found)
    wholes = {pair_of(o): o for o in overall(found)}
    lines: list[list[str]] = []
    for i, c in enumerate(found):
        v = c.verdict
        adjusted = "—" if v.adjusted is None else f"{v.adjusted:.0%}"
        lines.append([c.bucket, c.metric, c.kind, c.candidate, c.baseline, _verdict(v.verdict, v.trusted),
                      _pct(v.estimate), f"{_pct(v.lower)} … {_pct(v.upper)}",
                      f"{v.n_candidate} vs {v.n_baseline}", adjusted, _notes(v.checks)])
        last = i + 1 == len(found) or pair_of(found[i + 1]) != pair_of(c)
        whole = wholes.get(pair_of(c))
        if last and whole is not None:
            lines.append([c.bucket, "overall", c.kind, c.candidate, c.baseline,
                          _verdict(whole.verdict, whole.trusted), "", "", f"{whole.n_candidate} vs "
                          f"{whole.n_baseline}", "", _notes(checks.get(pair_of(c), []))])
    widths = [max(len(str(x)) for x in column) for column in zip(head, *lines, strict=True)]
    text = "\n".join("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
                     for line in [head, *lines]) + "\n"
    flagged = [(key, check) for key, held in checks.items() for check in held if check.flagged]
    if flagged:
        text += "\nflagged checks:\n" + "".join(
            f"  {bucket} {kind} {candidate} vs {baseline}: {check.name.replace('_', ' ')}: {check.detail}\n"
            for (bucket, kind, baseline, candidate), check in flagged)
    return text


async def fetch(settings: Any, direct: bool = False) -> list[Comparison]:
    import time

    from monitor.store.client import connect
    from monitor.store.writer import RedisState
    from monitor.worker.rollup_lease import RollupLease
    from monitor.worker.verdicts import current

    redis = connect(settings.redis_url, socket_connect_timeout=5, socket_timeout=30,
                    **settings.redis_options())
    try:
        state = RedisState(redis, settings.stream, settings.grade_scale(), settings.partitions,
                           prefix=settings.redis_prefix, groups=settings.redis_groups)
        if not direct:
            rollup = await RollupLease(state, settings.canary(), settings.rollup_interval).read()
            if rollup is not None and not rollup.stale(time.time()):
                return list(rollup.shared.verdicts.comparisons)
            sys.stderr.write("monitor canary: no fresh rollup in Redis (no worker running with these "
                             "settings?): verdicts computed from the partitions\n")
        return (await current(state, settings.canary())).comparisons
    finally:
        await redis.aclose()


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    services = found_services(os.environ)
    hint = partial(default_hint, key="redis_url", services=services)
    try:
        settings = load_settings(os.environ, args.config, services)
    except SettingsError as error:
        return refused("monitor canary", error)
    try:
        found = asyncio.run(fetch(settings, args.direct))
    except OSError as error:
        sys.stderr.write(f"monitor canary: cannot read Redis ({error}){hint(settings)}\n")
        return 2
    except Exception as error:  # redis-py's connection errors are not OSErrors
        sys.stderr.write(f"monitor canary: cannot read Redis ({type(error).__name__}: {error})"
                         f"{hint(settings)}\n")
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
        sys.stdout.write(json.dumps(rows(shown), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(table(shown))
    return 1 if any(c.verdict.verdict == "regression" for c in shown) else 0
