"""Time series of a recorded run, ready to plot: per bucket and arm, and per canary comparison.

An arm is a traffic variant (``control``, ``canary``) within a bucket; its rankers' statistics are merged
(they are sums). Values are floats with NaN where a point has no data (no data is not zero: a plot shows
a gap), so they go straight into matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from monitor.core.events import BUCKETS
from monitor.core.stream.session import split_group
from monitor.core.stream.stats import Stats, summarise
from monitor.demo.intervals import pnr_interval
from monitor.demo.recording import Recording

NAN = math.nan
VARIANT_ORDER = {"control": 0, "canary": 1}


def _or_nan(value: float | None) -> float:
    return NAN if value is None or not math.isfinite(value) else float(value)


@dataclass
class ArmSeries:
    bucket: str
    variant: str
    rankers: set[str] = field(default_factory=set)
    ts: list[float] = field(default_factory=list)
    dcg: list[float] = field(default_factory=list)
    dcg_lower: list[float] = field(default_factory=list)
    dcg_upper: list[float] = field(default_factory=list)
    pnr: list[float] = field(default_factory=list)
    pnr_lower: list[float] = field(default_factory=list)
    pnr_upper: list[float] = field(default_factory=list)
    coverage: list[float] = field(default_factory=list)
    sessions: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.variant} ({', '.join(sorted(self.rankers))})"

    def append(self, ts: float, stats: Stats | None) -> None:
        s = summarise(stats or {})
        dcg_ci = s.dcg_ci or (None, None)
        pnr_ci = pnr_interval(stats) if stats else None
        self.ts.append(ts)
        self.dcg.append(_or_nan(s.dcg))
        self.dcg_lower.append(_or_nan(dcg_ci[0]))
        self.dcg_upper.append(_or_nan(dcg_ci[1]))
        self.pnr.append(_or_nan(s.pnr))
        self.pnr_lower.append(_or_nan(pnr_ci[0] if pnr_ci else None))
        self.pnr_upper.append(_or_nan(pnr_ci[1] if pnr_ci else None))
        self.coverage.append(_or_nan(s.coverage))
        self.sessions.append(float(s.sessions) if stats else NAN)


def bucket_order(bucket: str) -> tuple[int, str]:
    return (BUCKETS.index(bucket) if bucket in BUCKETS else len(BUCKETS), bucket)


def arm_key(key: tuple[str, str]) -> tuple[tuple[int, str], int, str]:
    return bucket_order(key[0]), VARIANT_ORDER.get(key[1], 9), key[1]


def arm_series(recording: Recording, window: str) -> dict[tuple[str, str], ArmSeries]:
    """(bucket, variant) → its series in ``window``, one value per recorded point (NaN: no data)."""
    arms: dict[tuple[str, str], ArmSeries] = {}
    for point in recording.points:
        for group in point.windows.get(window, {}):
            bucket, ranker, variant = split_group(group)
            arms.setdefault((bucket, variant), ArmSeries(bucket, variant)).rankers.add(ranker)
    for point in recording.points:
        merged: dict[tuple[str, str], Stats] = {}
        for group, stats in point.windows.get(window, {}).items():
            bucket, _, variant = split_group(group)
            merged.setdefault((bucket, variant), Stats()).add(stats)
        for key, series in arms.items():
            series.append(point.ts, merged.get(key))
    return dict(sorted(arms.items(), key=lambda item: arm_key(item[0])))


@dataclass
class VerdictSeries:
    bucket: str
    metric: str
    kind: str
    baseline: str
    candidate: str
    ts: list[float] = field(default_factory=list)
    estimate: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    verdict: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.candidate} vs {self.baseline}"


def verdict_series(recording: Recording) -> dict[tuple[str, str, str, str, str], VerdictSeries]:
    """(bucket, metric, kind, baseline, candidate) → the comparison's verdicts over time."""
    out: dict[tuple[str, str, str, str, str], VerdictSeries] = {}
    for point in recording.points:
        for v in point.verdicts:
            key = (str(v["bucket"]), str(v["metric"]), str(v["kind"]), str(v["baseline"]),
                   str(v["candidate"]))
            series = out.setdefault(key, VerdictSeries(*key))
            series.ts.append(point.ts)
            series.estimate.append(_or_nan(v.get("estimate")))
            series.lower.append(_or_nan(v.get("lower")))
            series.upper.append(_or_nan(v.get("upper")))
            series.verdict.append(str(v.get("verdict", "inconclusive")))
    return dict(sorted(out.items(), key=lambda item: (bucket_order(item[0][0]), item[0][1:])))
