"""Mergeable aggregates (river's shape: ``update``, ``revert``, ``+``/``merge``, ``take_back``, ``get``).

:class:`Mean` keeps the count, the sum and the sum of squares, so it merges exactly (sums are associative)
and gives a normal-approximation confidence interval. :class:`PairAggregate` sums PNR pair counts; the
aggregate PNR is the ratio of the summed counts (MISSION: never the mean of per-list ratios).

A take-back is explicit: ``revert`` removes one value added before, ``take_back`` (or ``-``) a merged
aggregate added before; both are exact in the counts and exact in the sums up to floating-point rounding.
No data is not zero: ``get()`` of an empty aggregate is None.

>>> a = Mean(); a.update(1.0); a.update(3.0); a.get()
2.0
>>> (a + Mean.of([5.0])).get()
3.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from monitor.core.metrics.pairs import PairCounts, TieConvention

Z_95 = 1.959963984540054


@dataclass
class Mean:
    """Count, sum and sum of squares of a stream of numbers.

    Plain sums (not Welford's running mean) so that partial aggregates merge by addition, as Redis
    ``HINCRBYFLOAT`` does atomically. The variance subtracts n·mean² from the sum of squares, which loses
    precision when the spread is tiny next to the mean; for relevance metrics (values of order 1–10,
    spreads of order 0.1–1) the relative error stays far below the confidence interval's own width.
    """

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Mean:
        mean = cls()
        for value in values:
            mean.update(value)
        return mean

    def update(self, x: float, weight: int = 1) -> None:
        """Add x; ``weight=-1`` removes a value added before (used for corrections). The revert is exact
        in n and exact in the sums up to floating-point rounding of the additions."""
        if not math.isfinite(x):
            raise ValueError(f"cannot aggregate a non-finite value {x!r}")
        self.n += weight
        self.total += weight * x
        self.total_sq += weight * x * x

    def revert(self, x: float) -> None:
        """Take back x, added before (``update(x, weight=-1)``)."""
        self.update(x, -1)

    def merge(self, other: Mean) -> None:
        self.n += other.n
        self.total += other.total
        self.total_sq += other.total_sq

    def take_back(self, other: Mean) -> None:
        """Take back ``other``, merged in before: the inverse of :meth:`merge`."""
        self.n -= other.n
        self.total -= other.total
        self.total_sq -= other.total_sq

    def __add__(self, other: Mean) -> Mean:
        return Mean(self.n + other.n, self.total + other.total, self.total_sq + other.total_sq)

    def __sub__(self, other: Mean) -> Mean:
        return Mean(self.n - other.n, self.total - other.total, self.total_sq - other.total_sq)

    def get(self) -> float | None:
        return self.total / self.n if self.n > 0 else None

    def variance(self) -> float | None:
        """Sample variance (n − 1 denominator); None below two values."""
        if self.n < 2:
            return None
        mean = self.total / self.n
        return max(self.total_sq - self.n * mean * mean, 0.0) / (self.n - 1)

    def confidence_interval(self, z: float = Z_95) -> tuple[float, float] | None:
        """mean ± z·s/√n (normal approximation); None below two values."""
        variance = self.variance()
        mean = self.get()
        if variance is None or mean is None:
            return None
        half = z * math.sqrt(variance / self.n)
        return mean - half, mean + half


@dataclass
class PairAggregate:
    """Summed PNR pair counts over many lists."""

    counts: PairCounts = field(default_factory=PairCounts)
    lists: int = 0

    def update(self, counts: PairCounts) -> None:
        self.counts = self.counts + counts
        self.lists += 1

    def revert(self, counts: PairCounts) -> None:
        """Take back one list's counts, added before: the inverse of :meth:`update` (exact: integers)."""
        self.counts = self.counts - counts
        self.lists -= 1

    def merge(self, other: PairAggregate) -> None:
        self.counts = self.counts + other.counts
        self.lists += other.lists

    def take_back(self, other: PairAggregate) -> None:
        """Take back ``other``, merged in before: the inverse of :meth:`merge`."""
        self.counts = self.counts - other.counts
        self.lists -= other.lists

    def __add__(self, other: PairAggregate) -> PairAggregate:
        return PairAggregate(self.counts + other.counts, self.lists + other.lists)

    def __sub__(self, other: PairAggregate) -> PairAggregate:
        return PairAggregate(self.counts - other.counts, self.lists - other.lists)

    def get(self, ties: TieConvention = "positive") -> float | None:
        return self.counts.pnr(ties)
