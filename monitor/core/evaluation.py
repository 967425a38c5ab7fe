"""The provider: computes :class:`~monitor.core.measures.Measure` values for judged lists, and their
aggregates over many lists (the mean of the defined per-list values, or, for a measure defined with a
:class:`~monitor.core.measures.PairRatio` such as PNR, the ratio of summed pair counts).

Each measure's definition (``monitor/core/measures/``) says how; this module only looks it up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from monitor.core.aggregates import Mean, PairAggregate
from monitor.core.judged import JudgedList
from monitor.core.measures import Measure, PairRatio, lookup
from monitor.core.measures.pnr import list_pair_counts
from monitor.core.metrics.pairs import PairCounts

__all__ = ["MeasureAggregate", "compute", "evaluate_lists", "list_pair_counts"]


def compute(measure: Measure, judged: JudgedList) -> float | None:
    """The value of one measure on one list (None where it is undefined, e.g. AUC of a one-class list)."""
    return lookup(measure.name).value(measure, judged)


@dataclass
class MeasureAggregate:
    """The aggregate of one measure over lists: a :class:`Mean` of defined values, or summed pair counts
    (when the measure's definition has ``pairs``)."""

    measure: Measure
    mean: Mean = field(default_factory=Mean)
    pairs: PairAggregate = field(default_factory=PairAggregate)

    @property
    def pair_ratio(self) -> PairRatio | None:
        """How the aggregate is formed from summed pair counts; None: it is the mean of the values."""
        return lookup(self.measure.name).pairs

    def update(self, judged: JudgedList, value: float | None = None) -> None:
        """Add one list; ``value``: its per-list value if computed already (not for pair counts)."""
        ratio = self.pair_ratio
        if ratio is not None:
            self.pairs.update(ratio.counts(judged))
            return
        value = compute(self.measure, judged) if value is None else value
        if value is not None:
            self.mean.update(value)

    def add(self, judged: JudgedList) -> float | None:
        """Add one list and return its per-list value (pair counts are counted once for both)."""
        ratio = self.pair_ratio
        if ratio is not None:
            counts = ratio.counts(judged)
            self.pairs.update(counts)
            return ratio.ratio(self.measure, counts)
        value = compute(self.measure, judged)
        if value is not None:
            self.mean.update(value)
        return value

    def update_value(self, value: float | None) -> None:
        """Add a precomputed per-list value (not for a measure whose aggregate needs the pair counts)."""
        if self.pair_ratio is not None:
            raise ValueError(f"{self.measure.name} aggregates pair counts; use update_pairs")
        if value is not None:
            self.mean.update(value)

    def update_pairs(self, counts: PairCounts) -> None:
        self.pairs.update(counts)

    def merge(self, other: MeasureAggregate) -> None:
        if other.measure != self.measure:
            raise ValueError(f"cannot merge {other.measure} into {self.measure}")
        self.mean.merge(other.mean)
        self.pairs.merge(other.pairs)

    def get(self) -> float | None:
        ratio = self.pair_ratio
        if ratio is not None:
            return ratio.ratio(self.measure, self.pairs.counts)
        return self.mean.get()


def evaluate_lists(
    measures: Iterable[Measure], lists: Mapping[str, JudgedList]
) -> tuple[dict[Measure, float | None], dict[str, dict[Measure, float | None]]]:
    """Aggregate and per-list values of ``measures`` over ``lists`` (keyed by query or session id)."""
    aggregates = {m: MeasureAggregate(m) for m in dict.fromkeys(measures)}
    per_list = {key: {m: a.add(judged) for m, a in aggregates.items()} for key, judged in lists.items()}
    return {m: a.get() for m, a in aggregates.items()}, per_list
