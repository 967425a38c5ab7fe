"""The provider: computes :class:`~monitor.core.measures.Measure` values for judged lists, and their
aggregates over many lists (mean per list; PNR as the ratio of summed pair counts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from monitor.core.aggregates import Mean, PairAggregate
from monitor.core.judged import JudgedList
from monitor.core.measures import Measure
from monitor.core.metrics import (
    auc,
    average_precision,
    cg,
    dcg,
    err,
    kendall_tau_distance,
    ndcg,
    pair_counts,
    precision,
    rbp,
    recall,
    reciprocal_rank,
    seed_average_precision,
)
from monitor.core.metrics.gain import Discount, Gain
from monitor.core.metrics.pairs import PairCounts, TieConvention


def list_pair_counts(judged: JudgedList) -> PairCounts:
    """PNR pair counts over the labelled documents of the list, oriented by model score."""
    return pair_counts(judged.levels[judged.judged], judged.scores[judged.judged])


def compute(measure: Measure, judged: JudgedList) -> float | None:
    """The value of one measure on one list (None where it is undefined, e.g. AUC of a one-class list)."""
    k = measure.cutoff
    name = measure.name
    if name in {"DCG", "nDCG"}:
        gain: Gain = "exponential" if measure.param("gain") == "exp" else "linear"
        discount = cast(Discount, measure.param("discount"))
        if name == "DCG":
            return dcg(judged.gains, k, gain, discount)
        return ndcg(judged.gains, judged.pool_gains, k, gain, discount)
    if name == "CG":
        return cg(judged.gains, k)
    if name == "P":
        return precision(judged.relevant, cast(int, k))
    if name == "R":
        return recall(judged.relevant, k, judged.n_relevant)
    if name == "AP":
        if k is None:
            return average_precision(judged.relevant, judged.n_relevant)
        return seed_average_precision(judged.relevant, k)
    if name == "RR":
        return reciprocal_rank(judged.relevant, k)
    if name == "RBP":
        return rbp(judged.gains, float(measure.param("p")), k)
    if name == "ERR":
        return err(judged.levels, judged.max_level, k, float(measure.param("p")))
    if name == "AUC":
        return auc(judged.scores[judged.judged], judged.relevant[judged.judged])
    if name == "PNR":
        return list_pair_counts(judged).pnr(cast(TieConvention, measure.param("ties")))
    if name == "KendallTau":
        return float(kendall_tau_distance(judged.levels[judged.judged]))
    raise ValueError(f"no provider for measure {measure}")


@dataclass
class MeasureAggregate:
    """The aggregate of one measure over lists: a :class:`Mean` of defined values, or summed pair counts."""

    measure: Measure
    mean: Mean = field(default_factory=Mean)
    pairs: PairAggregate = field(default_factory=PairAggregate)

    def update(self, judged: JudgedList, value: float | None = None) -> None:
        if self.measure.name == "PNR":
            self.pairs.update(list_pair_counts(judged))
            return
        value = compute(self.measure, judged) if value is None else value
        if value is not None:
            self.mean.update(value)

    def update_value(self, value: float | None) -> None:
        """Add a precomputed per-list value (not for PNR, whose aggregate needs the counts)."""
        if self.measure.name == "PNR":
            raise ValueError("PNR aggregates pair counts; use update_pairs")
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
        if self.measure.name == "PNR":
            return self.pairs.get(cast(TieConvention, self.measure.param("ties")))
        return self.mean.get()


def evaluate_lists(
    measures: Iterable[Measure], lists: Mapping[str, JudgedList]
) -> tuple[dict[Measure, float | None], dict[str, dict[Measure, float | None]]]:
    """Aggregate and per-list values of ``measures`` over ``lists`` (keyed by query or session id)."""
    wanted = list(dict.fromkeys(measures))
    aggregates = {m: MeasureAggregate(m) for m in wanted}
    per_list: dict[str, dict[Measure, float | None]] = {}
    for key, judged in lists.items():
        values = {m: compute(m, judged) for m in wanted}
        per_list[key] = values
        for m in wanted:
            if m.name == "PNR":
                aggregates[m].update(judged)
            else:
                aggregates[m].update_value(values[m])
    return {m: a.get() for m, a in aggregates.items()}, per_list
