"""Many ranked lists at once: :class:`RankedBatch`, and the segmented passes the measures share over it.

A :class:`RankedBatch` holds every list's documents back to back in rank order, cut by ``offsets``
(list g is ``offsets[g]:offsets[g+1]``; empty lists allowed), and each list's judgment pool sorted by gain
descending. A measure's vectorised value (the ``batch`` of its definition in ``monitor/core/measures/``)
computes all lists with a handful of numpy passes: ``bincount`` over segment ids (:func:`segment_sum`),
the first k rows of each list as a matrix (:func:`head`, :func:`head_sum`, :func:`top_sum`), or only the
relevant rows (:func:`relevant_hits`). Nothing here knows a measure by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np
import numpy.typing as npt

from monitor.core.judged import JudgedList
from monitor.core.metrics.gain import Gain, transform_gains

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


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
        return segment_ids(self.offsets)

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


def segment_ids(offsets: IntArray) -> tuple[IntArray, IntArray]:
    """(segment id, 0-based rank within the segment) of every element."""
    sizes = np.diff(offsets)
    ids = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    ranks = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], sizes)
    return ids, ranks


def segment_sum(ids: IntArray, weights: FloatArray, n: int) -> FloatArray:
    """Per segment, the sum of ``weights`` over its elements (in element order)."""
    return np.bincount(ids, weights=weights, minlength=n).astype(np.float64)


def head(offsets: IntArray, k: int) -> tuple[IntArray, BoolArray] | None:
    """The rows of the first k documents of each list as an (n, k) matrix and which of them exist; None
    when that matrix would be larger than the lists themselves (then a pass over every row is cheaper)."""
    n, total = offsets.size - 1, int(offsets[-1])
    if n * k > max(total, 64):
        return None
    columns = np.arange(k, dtype=np.int64)
    return offsets[:-1, None] + columns, columns < np.diff(offsets)[:, None]


def head_sum(values: FloatArray, rows: tuple[IntArray, BoolArray], weights: FloatArray | None = None,
             transform: Gain = "linear") -> FloatArray:
    """Per list, Σ over its first k documents (``rows``, from :func:`head`) of transform(value) × weight
    of the rank, summed in rank order (as ``bincount`` sums a list, so the result is the same to the last
    bit as the pass over every row)."""
    matrix, exists = rows
    n, k = matrix.shape
    if values.size == 0:
        return np.zeros(n, dtype=np.float64)
    picked = transform_gains(values[np.minimum(matrix, values.size - 1)], transform)
    if weights is not None:
        picked = picked * weights[:k]
    picked[~exists] = 0.0
    return segment_sum(np.repeat(np.arange(n, dtype=np.int64), k), picked.ravel(), n)


def top(ranks: IntArray, values: FloatArray, k: int | None) -> FloatArray:
    """``values`` where the 0-based rank is below k, 0 elsewhere (all of them when k is None)."""
    return values if k is None else np.where(ranks < k, values, 0.0)


def top_sum(batch: RankedBatch, values: FloatArray, k: int | None) -> FloatArray:
    """Per list, the sum of ``values`` (one per document of the batch) over its first k documents (all
    when k is None)."""
    rows = None if k is None else head(batch.offsets, k)
    if rows is not None:
        return head_sum(values, rows)
    ids, ranks = batch.segments
    return segment_sum(ids, top(ranks, values, k), batch.n_lists)


def relevant_hits(batch: RankedBatch, k: int | None) -> tuple[IntArray, IntArray, IntArray]:
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
