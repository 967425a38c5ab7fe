"""Many ranked lists at once: the rank-based measures over concatenated, segmented arrays.

A :class:`RankedBatch` holds every list's documents back to back in rank order, cut by ``offsets``
(list g is ``offsets[g]:offsets[g+1]``; empty lists allowed), and each list's judgment pool sorted by gain
descending. Rank-based measures are computed for all lists with a handful of numpy passes
(``bincount`` over segment ids); pairwise measures and AUC fall back to the per-list functions. Results
equal :func:`monitor.core.evaluation.compute` on each list (tested to 1e-12).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np
import numpy.typing as npt

from monitor.core.aggregates import Mean
from monitor.core.evaluation import MeasureAggregate, compute, list_pair_counts
from monitor.core.judged import JudgedList
from monitor.core.measures import Measure
from monitor.core.metrics.cascade import satisfaction
from monitor.core.metrics.gain import Discount, Gain, discounts, transform_gains

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_PADDED_LIMIT = 20_000_000  # cells of the G × width matrix ERR uses before falling back to a loop


@dataclass(frozen=True)
class RankedBatch:
    """Lists back to back (see the module docstring); arrays as in :class:`JudgedList`."""

    keys: Sequence[str]
    offsets: IntArray
    gains: FloatArray
    levels: FloatArray
    relevant: FloatArray
    judged: BoolArray
    scores: FloatArray
    pool_offsets: IntArray
    pool_gains: FloatArray  # sorted descending within each list's pool
    n_relevant: IntArray
    max_level: float

    def __post_init__(self) -> None:
        if self.offsets.size != len(self.keys) + 1 or self.pool_offsets.size != len(self.keys) + 1:
            raise ValueError("offsets must have one more entry than keys")

    @property
    def n_lists(self) -> int:
        return len(self.keys)

    @cached_property
    def segments(self) -> tuple[IntArray, IntArray]:
        """(list id, 0-based rank) of every document, computed once per batch."""
        return _segment_ids(self.offsets)

    @classmethod
    def from_lists(cls, keys: Sequence[str], lists: Sequence[JudgedList], max_level: float) -> RankedBatch:
        sizes = np.array([jl.size for jl in lists], dtype=np.int64)
        pool_sizes = np.array([jl.pool_gains.size for jl in lists], dtype=np.int64)

        def cat(arrays: Iterable[npt.NDArray[np.generic]], dtype: type) -> npt.NDArray[np.generic]:
            parts = list(arrays)
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        return cls(
            keys=list(keys),
            offsets=np.r_[0, np.cumsum(sizes)].astype(np.int64),
            gains=cast(FloatArray, cat((jl.gains for jl in lists), np.float64)),
            levels=cast(FloatArray, cat((jl.levels for jl in lists), np.float64)),
            relevant=cast(FloatArray, cat((jl.relevant for jl in lists), np.float64)),
            judged=cast(BoolArray, cat((jl.judged for jl in lists), np.bool_)),
            scores=cast(FloatArray, cat((jl.scores for jl in lists), np.float64)),
            pool_offsets=np.r_[0, np.cumsum(pool_sizes)].astype(np.int64),
            pool_gains=cast(FloatArray, cat((-np.sort(-jl.pool_gains) for jl in lists), np.float64)),
            n_relevant=np.array([jl.n_relevant for jl in lists], dtype=np.int64),
            max_level=max_level,
        )

    def judged_list(self, g: int) -> JudgedList:
        lo, hi = int(self.offsets[g]), int(self.offsets[g + 1])
        plo, phi = int(self.pool_offsets[g]), int(self.pool_offsets[g + 1])
        return JudgedList(self.gains[lo:hi], self.levels[lo:hi], self.relevant[lo:hi], self.judged[lo:hi],
                          self.scores[lo:hi], self.pool_gains[plo:phi], int(self.n_relevant[g]),
                          self.max_level)


def _segment_ids(offsets: IntArray) -> tuple[IntArray, IntArray]:
    """(segment id, 0-based rank within the segment) of every element."""
    sizes = np.diff(offsets)
    ids = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    ranks = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], sizes)
    return ids, ranks


def _segment_sum(ids: IntArray, weights: FloatArray, n: int) -> FloatArray:
    return np.bincount(ids, weights=weights, minlength=n).astype(np.float64)


def _head(offsets: IntArray, k: int) -> tuple[IntArray, BoolArray] | None:
    """The rows of the first k documents of each list as an (n, k) matrix and which of them exist; None
    when that matrix would be larger than the lists themselves (then a pass over every row is cheaper)."""
    n, total = offsets.size - 1, int(offsets[-1])
    if n * k > max(total, 64):
        return None
    columns = np.arange(k, dtype=np.int64)
    return offsets[:-1, None] + columns, columns < np.diff(offsets)[:, None]


def _head_sum(values: FloatArray, head: tuple[IntArray, BoolArray], weights: FloatArray | None = None,
              transform: Gain = "linear") -> FloatArray:
    """Per list, Σ over its first k documents of transform(value) × weight of the rank, summed in rank
    order (as ``bincount`` sums a list, so the result is the same to the last bit as the pass over every
    row)."""
    rows, exists = head
    n, k = rows.shape
    if values.size == 0:
        return np.zeros(n, dtype=np.float64)
    picked = transform_gains(values[np.minimum(rows, values.size - 1)], transform)
    if weights is not None:
        picked = picked * weights[:k]
    picked[~exists] = 0.0
    return _segment_sum(np.repeat(np.arange(n, dtype=np.int64), k), picked.ravel(), n)


def _dcg(gains: FloatArray, offsets: IntArray, k: int | None, gain: Gain, discount: Discount,
         segments: Callable[[], tuple[IntArray, IntArray]] | None = None) -> FloatArray:
    n = offsets.size - 1
    if gains.size == 0:
        return np.zeros(n, dtype=np.float64)
    head = None if k is None else _head(offsets, k)
    if head is not None:
        return _head_sum(gains, head, discounts(head[0].shape[1], discount), gain)
    ids, ranks = _segment_ids(offsets) if segments is None else segments()
    table = discounts(int(ranks.max()) + 1, discount)
    weights = transform_gains(gains, gain) * table[ranks]
    if k is not None:
        weights = np.where(ranks < k, weights, 0.0)
    return _segment_sum(ids, weights, n)


def _top_sum(batch: RankedBatch, values: FloatArray, k: int | None) -> FloatArray:
    """Per list, the sum of ``values`` over its first k documents (all when k is None)."""
    head = None if k is None else _head(batch.offsets, k)
    if head is not None:
        return _head_sum(values, head)
    ids, ranks = batch.segments
    return _segment_sum(ids, _top(ranks, values, k), batch.n_lists)


def _top(ranks: IntArray, values: FloatArray, k: int | None) -> FloatArray:
    return values if k is None else np.where(ranks < k, values, 0.0)


def _relevant_hits(batch: RankedBatch, k: int | None) -> tuple[IntArray, IntArray, IntArray]:
    """(list, 0-based rank, 1-based count of relevant documents so far in its list) of every relevant
    document ranked within the cutoff, in batch order: only those rows matter to AP and RR."""
    rows = np.flatnonzero(batch.relevant == 1.0)
    lists = np.searchsorted(batch.offsets, rows, side="right") - 1
    ranks = rows - batch.offsets[lists]
    if k is not None:
        within = ranks < k
        lists, ranks = lists[within], ranks[within]
    first = np.searchsorted(lists, np.arange(batch.n_lists, dtype=np.int64))  # each list's first hit
    counts = np.arange(1, lists.size + 1, dtype=np.int64) - first[lists]
    return lists, ranks, counts


def _err(batch: RankedBatch, k: int | None, p: float) -> FloatArray:
    sizes = np.diff(batch.offsets)
    width = int(sizes.max()) if sizes.size else 0
    width = width if k is None else min(width, k)
    n = batch.n_lists
    if n * width > _PADDED_LIMIT:
        measure = Measure("ERR", k, (("p", p),) if p != 1.0 else ())
        return np.array([compute(measure, batch.judged_list(g)) or 0.0 for g in range(n)])
    ids, ranks = batch.segments
    keep = ranks < width
    r = np.zeros((n, width), dtype=np.float64)
    r[ids[keep], ranks[keep]] = satisfaction(batch.levels[keep], batch.max_level)
    reach = np.ones_like(r)
    if width > 1:
        reach[:, 1:] = np.cumprod(p * (1.0 - r[:, :-1]), axis=1)
    out: FloatArray = (reach * r / np.arange(1, width + 1, dtype=np.float64)).sum(axis=1)
    return out


def measure_values(measure: Measure, batch: RankedBatch) -> list[float | None]:
    """Per-list values of one measure for every list of the batch."""
    k, name, n = measure.cutoff, measure.name, batch.n_lists
    values: FloatArray
    if name in {"DCG", "nDCG", "CG"}:
        gain: Gain = "exponential" if name != "CG" and measure.param("gain") == "exp" else "linear"
        discount = cast(Discount, measure.param("discount")) if name != "CG" else "log2"
        if name == "CG":
            values = _top_sum(batch, batch.gains, k)
        else:
            values = _dcg(batch.gains, batch.offsets, k, gain, discount, lambda: batch.segments)
        if name == "nDCG":
            ideal = _dcg(batch.pool_gains, batch.pool_offsets, k, gain, discount)
            values = np.divide(values, ideal, out=np.zeros(n, dtype=np.float64), where=ideal != 0.0)
    elif name in {"P", "R"}:
        hits = _top_sum(batch, batch.relevant, k)
        if name == "P":
            values = hits / float(cast(int, k))
        else:
            nrel = batch.n_relevant.astype(np.float64)
            values = np.divide(hits, nrel, out=np.zeros(n, dtype=np.float64), where=nrel > 0)
    elif name == "AP":
        lists, ranks, counts = _relevant_hits(batch, k)
        total = _segment_sum(lists, counts / (ranks + 1.0), n)
        denominator = (batch.n_relevant.astype(np.float64) if k is None
                       else np.bincount(lists, minlength=n).astype(np.float64))
        values = np.divide(total, denominator, out=np.zeros(n, dtype=np.float64), where=denominator > 0)
    elif name == "RR":
        lists, ranks, counts = _relevant_hits(batch, k)
        first = counts == 1
        values = np.zeros(n, dtype=np.float64)
        values[lists[first]] = 1.0 / (ranks[first] + 1.0)
    elif name == "RBP":
        ids, ranks = batch.segments
        p = float(measure.param("p"))
        weights = (1.0 - p) * batch.gains * np.power(p, ranks.astype(np.float64))
        values = _segment_sum(ids, _top(ranks, weights, k), n)
    elif name == "ERR":
        values = _err(batch, k, float(measure.param("p")))
    else:
        return [compute(measure, batch.judged_list(g)) for g in range(n)]
    return cast(list[float | None], values.tolist())


def evaluate_batch(
    measures: Iterable[Measure], batch: RankedBatch
) -> tuple[dict[Measure, float | None], dict[Measure, list[float | None]]]:
    """Aggregate (mean over lists; PNR from summed pair counts) and per-list values of each measure."""
    aggregate: dict[Measure, float | None] = {}
    per_list: dict[Measure, list[float | None]] = {}
    for measure in dict.fromkeys(measures):
        values = measure_values(measure, batch)
        per_list[measure] = values
        if measure.name == "PNR":
            pairs = MeasureAggregate(measure)
            for g in range(batch.n_lists):
                pairs.update_pairs(list_pair_counts(batch.judged_list(g)))
            aggregate[measure] = pairs.get()
        else:
            defined = np.array([v for v in values if v is not None], dtype=np.float64)
            # (defined * defined).sum(), not np.dot: a BLAS call wakes threads that then spin on the
            # other core
            mean = Mean(int(defined.size), float(defined.sum()), float((defined * defined).sum()))
            aggregate[measure] = mean.get()
    return aggregate, per_list
