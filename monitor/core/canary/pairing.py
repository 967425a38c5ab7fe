"""Which groups to compare: canary against control, and after against before a plain deploy.

``totals`` maps a group key ``bucket|ranker|variant`` to its cumulative Stats (added minus taken back);
``deploys`` are the deploy events seen (any order). Per bucket:

* **canary** (kind ``"canary"``): every ranker with a ``canary`` group is a candidate; its baseline is a
  ``control`` group of the same bucket: the ranker named ``previous`` by the candidate's latest
  ``canary_start`` if it has a control group there, else the control ranker with the most sessions
  (ties: by name). No control group, no comparison.
* **deploy** (kind ``"deploy"``): for the latest ``deploy`` event of each ranker R with a ``previous`` P,
  R's sessions against P's, each the sum of its ``control`` and unlabelled (``""``) groups. Such a
  comparison is weaker evidence than a canary (before and after differ in time too), and it ends when a
  newer ``deploy`` names R as its ``previous`` (R was replaced).

A ``rollback`` or ``canary_end`` of R newer than R's start (its ``canary_start``, resp. its ``deploy``;
for a canary without a ``canary_start``, any such event) ends R's comparison: none is returned for it.
Events with equal times are ordered as given. Each pair gives one comparison per metric (DCG, PNR); the
result is sorted by bucket (head, torso, tail, then others by name), kind, candidate, baseline, metric.

For a comparison of the canary period only, pass totals accumulated since the canary started (the
cumulative Stats now minus those at the start, field by field: Stats are sums).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from monitor.core.canary.compare import Verdict, compare
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.estimates import METRICS
from monitor.core.events import BUCKETS, Deploy
from monitor.core.stream.session import split_group
from monitor.core.stream.stats import Stats, add

KINDS = ("canary", "deploy")
PLAIN_VARIANTS = ("", "control")
ENDINGS = ("rollback", "canary_end")


@dataclass(frozen=True)
class Comparison:
    """One verdict: ``candidate`` against ``baseline`` (ranker names) in ``bucket`` on ``metric``."""

    bucket: str
    metric: str
    kind: str
    baseline: str
    candidate: str
    verdict: Verdict


Order = tuple[float, int]


def _latest(events: Sequence[tuple[Order, Deploy]], ranker: str, kind: str) -> tuple[Order, Deploy] | None:
    found = [(order, d) for order, d in events if d.ranker == ranker and d.kind == kind]
    return max(found, key=lambda item: item[0]) if found else None


def _ended(events: Sequence[tuple[Order, Deploy]], ranker: str, since: Order | None) -> bool:
    return any(d.ranker == ranker and d.kind in ENDINGS and (since is None or order > since)
               for order, d in events)


def _bucket_order(bucket: str) -> tuple[int, str]:
    return (BUCKETS.index(bucket) if bucket in BUCKETS else len(BUCKETS), bucket)


def _pair(bucket: str, kind: str, baseline: tuple[str, Stats], candidate: tuple[str, Stats],
          config: CanaryConfig) -> list[Comparison]:
    return [Comparison(bucket, metric, kind, baseline[0], candidate[0],
                       compare(baseline[1], candidate[1], metric, config)) for metric in METRICS]


def comparisons(totals: Mapping[str, Mapping[str, float]], deploys: Sequence[Deploy],
                config: CanaryConfig) -> list[Comparison]:
    """Every live comparison (module docstring), sorted."""
    events = [((d.ts, i), d) for i, d in enumerate(deploys)]
    groups: dict[str, dict[tuple[str, str], Stats]] = {}
    for key, stats in totals.items():
        bucket, ranker, variant = split_group(key)
        add(groups.setdefault(bucket, {}).setdefault((ranker, variant), {}), stats)
    out: list[Comparison] = []
    for bucket in sorted(groups, key=_bucket_order):
        arms = groups[bucket]
        out.extend(_canaries(bucket, arms, events, config))
        out.extend(_deploys(bucket, arms, events, config))
    kinds = {kind: i for i, kind in enumerate(KINDS)}
    metrics = {metric: i for i, metric in enumerate(METRICS)}
    return sorted(out, key=lambda c: (_bucket_order(c.bucket), kinds[c.kind], c.candidate, c.baseline,
                                      metrics[c.metric]))


def _canaries(bucket: str, arms: Mapping[tuple[str, str], Stats],
              events: Sequence[tuple[Order, Deploy]], config: CanaryConfig) -> list[Comparison]:
    controls = {ranker: stats for (ranker, variant), stats in arms.items() if variant == "control"}
    out: list[Comparison] = []
    if not controls:
        return out
    for (ranker, variant), stats in sorted(arms.items()):
        if variant != "canary":
            continue
        start = _latest(events, ranker, "canary_start")
        if _ended(events, ranker, None if start is None else start[0]):
            continue
        named = None if start is None else start[1].previous
        if named is not None and named in controls:
            baseline = named
        else:
            baseline = min(controls, key=lambda r: (-controls[r].get("sessions", 0.0), r))
        out.extend(_pair(bucket, "canary", (baseline, controls[baseline]), (ranker, stats), config))
    return out


def _plain(arms: Mapping[tuple[str, str], Stats], ranker: str) -> Stats | None:
    found = [stats for (r, variant), stats in arms.items() if r == ranker and variant in PLAIN_VARIANTS]
    if not found:
        return None
    merged: Stats = {}
    for stats in found:
        add(merged, stats)
    return merged


def _deploys(bucket: str, arms: Mapping[tuple[str, str], Stats],
             events: Sequence[tuple[Order, Deploy]], config: CanaryConfig) -> list[Comparison]:
    out: list[Comparison] = []
    latest: dict[str, tuple[Order, Deploy]] = {}
    for order, d in events:
        if d.kind == "deploy" and (d.ranker not in latest or order > latest[d.ranker][0]):
            latest[d.ranker] = (order, d)
    for ranker, (order, deploy) in sorted(latest.items()):
        previous = deploy.previous
        if previous is None or previous == ranker or _ended(events, ranker, order):
            continue
        if any(d.kind == "deploy" and d.previous == ranker and o > order for o, d in events):
            continue
        candidate, baseline = _plain(arms, ranker), _plain(arms, previous)
        if candidate is None and baseline is None:
            continue
        out.extend(_pair(bucket, "deploy", (previous, baseline or {}), (ranker, candidate or {}), config))
    return out
