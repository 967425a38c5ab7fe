"""ROC AUC of scores against binary relevance, ties counted ½ (Mann–Whitney U / (n₊ n₋); seed 000).

    AUC = (Σ_{p relevant, q not} [s_p > s_q] + ½ [s_p = s_q]) / (n₊ n₋)

Undefined (None: no data, not 0.5) when the list has no relevant or no non-relevant document.

>>> auc([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0])
0.75
"""

from __future__ import annotations

import numpy as np

from monitor.core.metrics._arrays import ArrayLike, FloatArray, as_floats


def _average_ranks(values: FloatArray) -> FloatArray:
    """1-based ranks with ties given their mean rank (as scipy.stats.rankdata 'average')."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    mean_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def auc(scores: ArrayLike, relevant: ArrayLike) -> float | None:
    s = as_floats(scores, "scores")
    y = as_floats(relevant, "relevant")
    if s.size != y.size:
        raise ValueError(f"scores and relevant differ in length: {s.size} != {y.size}")
    if np.isnan(s).any():
        raise ValueError("scores must not be NaN")
    positive = y == 1.0
    n_pos = int(positive.sum())
    n_neg = s.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = float(_average_ranks(s)[positive].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
