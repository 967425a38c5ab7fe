"""Which groups to compare, over which period: canary against control, and after against before a deploy.

Input: the :class:`~monitor.core.stream.history.History` (net statistics per event-time epoch and group
``bucket|ranker|variant``, and when each ranker was first and last seen per arm) and the deploy events
seen (any order). Per bucket:

* **canary** (kind ``"canary"``): every ranker R with a ``canary`` group is a candidate. Its period starts
  at R's latest ``canary_start``, or, without one, at R's first canary impression; both arms are summed
  over the epochs from the one holding that start on, so the control's sessions from before the canary
  do not enter (exact to one epoch, ``StreamConfig.epoch``). The baseline is a ``control`` group of the
  same bucket: the ranker named ``previous`` by R's latest ``canary_start`` if it has control sessions in
  the period, else the control ranker with the most sessions in the period (ties: by name). No control
  group, no comparison.
* **deploy** (kind ``"deploy"``): for the latest ``deploy`` event of each ranker R with a ``previous`` P,
  R's sessions from the deploy's epoch on against P's recent baseline: P's sessions in the
  ``CanaryConfig.baseline_window`` before the deploy, up to its epoch; each the sum of the ``control``
  and unlabelled (``""``) groups. Such a comparison is weaker evidence than a canary (before and after
  differ in time too), and it ends when a newer ``deploy`` names R as its ``previous`` (R was replaced).

**Detected deploys** (:func:`detect_deploys`): a ranker R whose first plain impression lies in a later
epoch than the first of some other plain ranker, which has served for at least one epoch since (a stray
impression is not a deploy), and which no ``deploy`` event names, was deployed without an event: a
``deploy`` of R at its first impression is assumed, its ``previous`` being the plain ranker seen most
recently before it (last seen in R's first epoch or the one before; ties: by name). Rankers present
from the first epoch are never "detected".

A ``rollback`` or ``canary_end`` of R newer than R's start (its ``canary_start``, resp. its ``deploy``;
for a canary without a ``canary_start``, any such event) ends R's comparison: none is returned for it.
Events with equal times are ordered as given. Each pair gives one comparison per metric (DCG, PNR); the
result is sorted by bucket (head, torso, tail, then others by name), kind, candidate, baseline, metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from monitor.core.canary.compare import Verdict, compare
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.estimates import METRICS
from monitor.core.events import BUCKETS, Deploy
from monitor.core.stream.history import History
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


def detect_deploys(history: History, deploys: Sequence[Deploy]) -> list[Deploy]:
    """The deploys the impressions show but no ``deploy`` event names (module docstring), by time."""
    named = {d.ranker for d in deploys if d.kind == "deploy"}
    plain = {ranker: span for (arm, ranker), span in history.seen.items() if arm == "plain"}
    out = []
    for ranker, (first, last) in sorted(plain.items()):
        if ranker in named or last - first < history.width:
            continue
        epoch = history.epoch(first)
        before = [(last, other) for other, (other_first, last) in plain.items()
                  if other != ranker and history.epoch(other_first) < epoch
                  and history.epoch(last) >= epoch - 1]
        if before:
            previous = min(before, key=lambda item: (-item[0], item[1]))[1]
            out.append(Deploy("deploy", ranker, first, previous=previous))
    return sorted(out, key=lambda d: (d.ts, d.ranker))


def first_epoch(history: History, deploys: Sequence[Deploy], config: CanaryConfig) -> int | None:
    """The oldest epoch any comparison may read (a reader need not load older ones); None: no deploy
    event and no canary seen, so no epoch is needed."""
    every = [*deploys, *detect_deploys(history, deploys)]
    starts = [d.ts for d in every if d.kind == "canary_start"]
    starts.extend(d.ts - config.baseline_window for d in every if d.kind == "deploy" and d.previous)
    starts.extend(first for (arm, _), (first, _) in history.seen.items() if arm == "canary")
    return history.epoch(min(starts)) if starts else None


def comparisons(history: History, deploys: Sequence[Deploy], config: CanaryConfig) -> list[Comparison]:
    """Every live comparison (module docstring), sorted."""
    events = [((d.ts, i), d) for i, d in enumerate([*deploys, *detect_deploys(history, deploys)])]
    buckets = {split_group(g)[0] for groups in history.epochs.values() for g in groups}
    out: list[Comparison] = []
    for bucket in sorted(buckets, key=_bucket_order):
        out.extend(_canaries(bucket, history, events, config))
        out.extend(_deploys(bucket, history, events, config))
    kinds = {kind: i for i, kind in enumerate(KINDS)}
    metrics = {metric: i for i, metric in enumerate(METRICS)}
    return sorted(out, key=lambda c: (_bucket_order(c.bucket), kinds[c.kind], c.candidate, c.baseline,
                                      metrics[c.metric]))


def _arms(history: History, bucket: str, first: int | None,
          last: int | None = None) -> dict[tuple[str, str], Stats]:
    """(ranker, variant) → stats of ``bucket``'s groups over the epochs ``first`` … ``last``."""
    out: dict[tuple[str, str], Stats] = {}
    for group, stats in history.totals(first, last).items():
        group_bucket, ranker, variant = split_group(group)
        if group_bucket == bucket:
            add(out.setdefault((ranker, variant), {}), stats)
    return out


def _canaries(bucket: str, history: History, events: Sequence[tuple[Order, Deploy]],
              config: CanaryConfig) -> list[Comparison]:
    out: list[Comparison] = []
    candidates = sorted({ranker for (ranker, variant) in _arms(history, bucket, None) if variant == "canary"})
    for ranker in candidates:
        start = _latest(events, ranker, "canary_start")
        if _ended(events, ranker, None if start is None else start[0]):
            continue
        since = start[1].ts if start is not None else history.seen.get(("canary", ranker), (None, None))[0]
        arms = _arms(history, bucket, None if since is None else history.epoch(since))
        controls = {r: stats for (r, variant), stats in arms.items()
                    if variant == "control" and stats.get("sessions", 0.0) > 0}
        if not controls:
            continue
        named = None if start is None else start[1].previous
        if named is not None and named in controls:
            baseline = named
        else:
            baseline = min(controls, key=lambda r: (-controls[r].get("sessions", 0.0), r))
        out.extend(_pair(bucket, "canary", (baseline, controls[baseline]),
                         (ranker, arms.get((ranker, "canary"), {})), config))
    return out


def _plain(arms: Mapping[tuple[str, str], Stats], ranker: str) -> Stats | None:
    found = [stats for (r, variant), stats in arms.items() if r == ranker and variant in PLAIN_VARIANTS]
    if not found:
        return None
    merged: Stats = {}
    for stats in found:
        add(merged, stats)
    return merged


def _deploys(bucket: str, history: History, events: Sequence[tuple[Order, Deploy]],
             config: CanaryConfig) -> list[Comparison]:
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
        epoch = history.epoch(deploy.ts)
        back = history.epoch(deploy.ts - config.baseline_window)
        candidate = _plain(_arms(history, bucket, epoch), ranker)
        baseline = _plain(_arms(history, bucket, back, epoch), previous)
        if candidate is None and baseline is None:
            continue
        out.extend(_pair(bucket, "deploy", (previous, baseline or {}), (ranker, candidate or {}), config))
    return out
