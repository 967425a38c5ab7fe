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
* **shadow** (kind ``"shadow"``): every ranker R with a ``shadow`` group (paired sums of the sessions
  whose shadow list of R was scored) against the lists those sessions were served (baseline ``served``),
  from the first epoch of the group, judged paired (:mod:`.shadow`).

Deploys without an event are detected from the impressions (:mod:`.detection`) and join the deploy
events.

A ``rollback`` or ``canary_end`` of R newer than R's start (its ``canary_start``, resp. its ``deploy``;
for a canary without a ``canary_start``, any such event) ends R's comparison: none is returned for it.
Events with equal times are ordered as given. Each pair gives one comparison per metric (DCG, PNR); the
result is sorted by bucket (head, torso, tail, then others by name), kind, candidate, baseline, metric.

**How a pair is judged**: :func:`.judging.judge`, a look per epoch of the period, time-matched and
sticky (docs/canary.md). A canary whose ``canary_start`` (or a later ``canary_share``) declares its
traffic ``share`` also gets the sample-ratio check of :mod:`.checks` on its impressions: a mismatch makes
its verdicts untrusted ("pass" becomes "inconclusive"; the reason says why). A ``canary_share`` event
changes the declared share from its time on and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from monitor.core.canary.checks import Check, Segment, sample_ratio
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.covariates import Adjustment, adjustment
from monitor.core.canary.detection import detect_deploys, every_deploy
from monitor.core.canary.estimates import METRICS
from monitor.core.canary.judging import Epochs, judge, total
from monitor.core.canary.shadow import SERVED, SHADOW, shadow_verdicts
from monitor.core.canary.share_change import log_evidence
from monitor.core.canary.verdict import Verdict
from monitor.core.events import BUCKETS, Deploy
from monitor.core.stream.history import History
from monitor.core.stream.session import split_group
from monitor.core.stream.stats import Stats

KINDS = ("canary", "deploy", SHADOW)
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


def first_epoch(history: History, deploys: Sequence[Deploy], config: CanaryConfig) -> int | None:
    """The oldest epoch any comparison may read (a reader need not load older ones); None: no deploy
    event, no canary and no shadow seen (arm ``shadow`` of ``History.seen``, where the stream records
    one), so no epoch is needed."""
    every = every_deploy(history, deploys)
    starts = [d.ts for d in every if d.kind == "canary_start"]
    starts.extend(d.ts - config.baseline_window for d in every if d.kind == "deploy" and d.previous)
    starts.extend(first for (arm, _), (first, _) in history.seen.items() if arm in ("canary", SHADOW))
    before = config.covariate_window if config.adjust_queries else 0.0  # the covariate's own history
    return history.epoch(min(starts) - before) if starts else None


def comparisons(history: History, deploys: Sequence[Deploy], config: CanaryConfig) -> list[Comparison]:
    """Every live comparison (module docstring), sorted."""
    events = [((d.ts, i), d) for i, d in enumerate([*deploys, *detect_deploys(history, deploys)])]
    buckets = {split_group(g)[0] for groups in history.epochs.values() for g in groups}
    out: list[Comparison] = []
    views: dict[int | None, History] = {}  # one view per settled frontier: its memo shared by the buckets
    for bucket in sorted(buckets, key=_bucket_order):
        frontier = history.settled(bucket, config.settle)
        settled = views.setdefault(frontier, history.until(frontier))
        out.extend(_canaries(bucket, settled, events, config))
        out.extend(_deploys(bucket, settled, events, config))
        endings = [(d.ranker, d.ts) for _, d in events if d.kind in ENDINGS]
        out.extend(Comparison(bucket, metric, SHADOW, SERVED, ranker, verdict)
                   for ranker, metric, verdict in shadow_verdicts(bucket, settled, endings, config))
    kinds = {kind: i for i, kind in enumerate(KINDS)}
    metrics = {metric: i for i, metric in enumerate(METRICS)}
    return sorted(out, key=lambda c: (_bucket_order(c.bucket), kinds[c.kind], c.candidate, c.baseline,
                                      metrics[c.metric]))


def _epochs(history: History, bucket: str, wanted: Callable[[str, str], bool], first: int | None = None,
            last: int | None = None) -> Epochs:
    """Epoch → the summed stats of ``bucket``'s groups (ranker, variant) that ``wanted`` selects, over
    the epochs ``first`` … ``last`` (inclusive; None: unbounded)."""
    out: Epochs = {}
    for index, groups in history.epochs.items():
        if (first is not None and index < first) or (last is not None and index > last):
            continue
        for group, stats in groups.items():
            group_bucket, ranker, variant = split_group(group)
            if group_bucket == bucket and wanted(ranker, variant):
                out.setdefault(index, Stats()).add(stats)
    return out


def _stratum(history: History, kind: str, config: CanaryConfig) -> Callable[[int], int]:
    """The time stratum of an epoch: its ``match_slot``-long stretch (canary) or its phase in
    ``match_period`` (deploy); one stratum without time matching."""
    if not config.time_matched:
        return lambda index: 0
    width, slot, period = history.width, config.match_slot, config.match_period
    if kind == "canary":
        return lambda index: math.floor(index * width / slot)
    return lambda index: math.floor((index * width) % period / slot)


def _pair(bucket: str, kind: str, names: tuple[str, str], baseline: Epochs, candidate: Epochs,
          looks: Sequence[int], history: History, config: CanaryConfig,
          adjust: Adjustment | None = None, ratio: Check | None = None) -> list[Comparison]:
    stratum = _stratum(history, kind, config)
    return [Comparison(bucket, metric, kind, names[0], names[1],
                       with_sample_ratio(judge(baseline, candidate, looks, kind == "canary", stratum, metric,
                                               config, history, adjust, bucket), ratio))
            for metric in METRICS]


def with_sample_ratio(verdict: Verdict, check: Check | None) -> Verdict:
    """``verdict`` with the pair's sample-ratio check: untrusted when it flagged a mismatch (a "pass"
    becomes "inconclusive": it cannot be trusted; a regression stays, marked)."""
    if check is None:
        return verdict
    checks = (*verdict.checks, check)
    if not check.flagged:
        return replace(verdict, checks=checks)
    why = f"sample ratio mismatch: {check.detail}; the split is not what was declared, so "
    if verdict.verdict == "pass":
        return replace(verdict, verdict="inconclusive", checks=checks, trusted=False,
                       reason=f"{why}a pass cannot be trusted ({verdict.reason})")
    return replace(verdict, checks=checks, trusted=False,
                   reason=f"{verdict.reason}; {why}this verdict cannot be trusted as it stands")


def _sample_ratio(events: Sequence[tuple[Order, Deploy]], ranker: str, start: tuple[Order, Deploy] | None,
                  looks: Sequence[int], control: Epochs, canary: Epochs, history: History,
                  config: CanaryConfig) -> Check | None:
    """The sample-ratio check of a canary (:mod:`.checks`): its impressions and its control's per look,
    in segments of constant declared share (the start's, then each later ``canary_share``'s), the epoch
    of each change left out; None when no share was declared."""
    changes = [(order, d) for order, d in events if d.ranker == ranker and d.kind == "canary_share"
               and d.share is not None and (start is None or order > start[0])]
    declared = [] if start is None or start[1].share is None else [start]
    declared += sorted(changes, key=lambda item: item[0])
    if not looks:
        return None
    if not declared:
        return observed_ratio(looks, control, canary, history.width, config)
    borders = [history.epoch(d.ts) for _, d in declared]
    segments = []
    for k, (_, d) in enumerate(declared):
        begin = borders[k]
        end = borders[k + 1] if k + 1 < len(borders) else None
        counted = [i for i, e in enumerate(looks) if e > begin and (end is None or e < end)
                   and e not in borders]
        if not counted:
            continue
        x, y = np.zeros(len(looks)), np.zeros(len(looks))
        for i in counted:
            x[i] = canary.get(looks[i], Stats()).get("impressions", 0.0)
            y[i] = control.get(looks[i], Stats()).get("impressions", 0.0)
        assert d.share is not None
        segments.append(Segment(d.share, x, y))
    return sample_ratio(segments, len(looks), config.check_alpha, config.mixture_sd)


def observed_ratio(looks: Sequence[int], control: Epochs, canary: Epochs, width: float,
                   config: CanaryConfig) -> Check | None:
    """The sample-ratio check of a canary that declared no share: the canary's share of the pair's
    impressions against the share it had in its first hour (:func:`.share_change.log_evidence`, at
    ``check_alpha``); None without an impression."""
    x = np.asarray([canary.get(e, Stats()).get("impressions", 0.0) for e in looks])
    n = x + np.asarray([control.get(e, Stats()).get("impressions", 0.0) for e in looks])
    if n.sum() <= 0:
        return None
    reference = sum(1 for e in looks if (e - looks[0]) * width < 3600.0)
    evidence = log_evidence(x, n, reference, "both")
    flagged = bool((evidence >= math.log(1.0 / config.check_alpha)).any())
    first = float(x[:reference].sum()) / float(n[:reference].sum()) if n[:reference].sum() > 0 else None
    later = float(x[reference:].sum()) / float(n[reference:].sum()) if n[reference:].sum() > 0 else None
    relative = None if first is None or later is None or first == 0 else later / first - 1.0
    since = "" if later is None else f"; since then {later:.2%} of {n[reference:].sum():,.0f} impressions"
    change = "" if relative is None else f" ({relative:+.1%})"
    bar = math.log(1 / config.check_alpha)
    threshold = f", a change declared (≥ log(1/α) = {bar:.1f})" if flagged else ""
    share = "" if first is None else f"{first:.2%}"
    detail = (f"no share declared: against the share of its first hour, {share}{since}{change}; "
              f"log e-value {float(evidence[-1]):.1f}{threshold}")
    return Check("sample_ratio", flagged, relative, None, None, float(evidence[-1]), first,
                 detail.replace("-", "−"), declared=False)


Wanted = Callable[[str, str], bool]
Span = tuple[int | None, int | None]


def _adjustment(history: History, bucket: str, arms: tuple[Wanted, Wanted], periods: tuple[Span, Span],
                start: int | None, config: CanaryConfig) -> Adjustment | None:
    """The pair's :class:`Adjustment` (baseline's and candidate's selection and epochs; ``start``: the
    comparison's first epoch), None when it is off or there is no query history."""
    if not config.adjust_queries or not history.queries or start is None:
        return None
    return adjustment(history, bucket, arms, periods, start, config)


def _canaries(bucket: str, history: History, events: Sequence[tuple[Order, Deploy]],
              config: CanaryConfig) -> list[Comparison]:
    out: list[Comparison] = []
    candidates = sorted({split_group(g)[1] for groups in history.epochs.values() for g in groups
                         if split_group(g)[0] == bucket and split_group(g)[2] == "canary"})
    for ranker in candidates:
        start = _latest(events, ranker, "canary_start")
        if _ended(events, ranker, None if start is None else start[0]):
            continue
        since = start[1].ts if start is not None else history.seen.get(("canary", ranker), (None, None))[0]
        first = None if since is None else history.epoch(since)
        controls: dict[str, Epochs] = {}
        for index, groups in history.epochs.items():
            if first is not None and index < first:
                continue
            for group, stats in groups.items():
                group_bucket, other, variant = split_group(group)
                if group_bucket == bucket and variant == "control":
                    controls.setdefault(other, {}).setdefault(index, Stats()).add(stats)
        sessions = {r: total(e).get("sessions", 0.0) for r, e in controls.items()}
        controls = {r: e for r, e in controls.items() if sessions[r] > 0}
        if not controls:
            continue
        named = None if start is None else start[1].previous
        if named is not None and named in controls:
            baseline = named
        else:
            baseline = min(controls, key=lambda r: (-sessions[r], r))
        def is_canary(r: str, variant: str, name: str = ranker) -> bool:
            return r == name and variant == "canary"

        def is_control(r: str, variant: str, name: str = baseline) -> bool:
            return r == name and variant == "control"

        canary = _epochs(history, bucket, is_canary, first)
        looks = sorted({*controls[baseline], *canary})
        adjust = _adjustment(history, bucket, (is_control, is_canary), ((first, None), (first, None)),
                             first if first is not None else min(looks, default=None), config)
        ratio = _sample_ratio(events, ranker, start, looks, controls[baseline], canary, history, config)
        out.extend(_pair(bucket, "canary", (baseline, ranker), controls[baseline], canary, looks, history,
                         config, adjust, ratio))
    return out


def _plain(history: History, bucket: str, ranker: str, first: int, last: int | None = None) -> Epochs | None:
    found = _epochs(history, bucket, lambda r, variant: r == ranker and variant in PLAIN_VARIANTS,
                    first, last)
    return found or None


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
        candidate = _plain(history, bucket, ranker, epoch)
        baseline = _plain(history, bucket, previous, back, epoch)
        if candidate is None and baseline is None:
            continue

        def plain(name: str) -> Callable[[str, str], bool]:
            return lambda r, variant: r == name and variant in PLAIN_VARIANTS

        adjust = _adjustment(history, bucket, (plain(previous), plain(ranker)),
                             ((back, epoch), (epoch, None)), back, config)
        out.extend(_pair(bucket, "deploy", (previous, ranker), baseline or {}, candidate or {},
                         sorted(candidate or {}), history, config, adjust))
    return out
