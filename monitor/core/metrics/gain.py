"""Gain-based list metrics: CG@k, DCG@k and NDCG@k (Järvelin & Kekäläinen 2002; seeds 000–004).

    CG@k  = Σ_{i≤k} g_i
    DCG@k = Σ_{i≤k} g_i / log2(i + 1)            (discount "log2", the seeds' and trec_eval's)
            g_1 + Σ_{2≤i≤k} g_i / log2(i)        (discount "jk", Järvelin–Kekäläinen's first form, seed 001)
    NDCG@k = DCG@k / IDCG@k, IDCG from *all* labelled documents of the query; 0 when IDCG = 0 (trec_eval).

With ``gain="exponential"`` each g is replaced by 2^g − 1 (Burges et al. 2005).

>>> y = [1, .7, .3, 1, .7, .7, .3, 0, .7, 0]
>>> round(cg(y, 4), 4), round(dcg(y, 4), 4), round(ideal_dcg(y, 4), 4)
(3.0, 2.0223, 2.2824)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np

from monitor.core.metrics._arrays import ArrayLike, FloatArray, as_floats, check_cutoff, head

Gain = Literal["linear", "exponential"]
Discount = Literal["log2", "jk"]


def transform_gains(gains: FloatArray, gain: Gain) -> FloatArray:
    if gain == "linear":
        return gains
    if gain == "exponential":
        return np.exp2(gains) - 1.0
    raise ValueError(f"unknown gain {gain!r}; accepted: linear, exponential")


def discounts(n: int, discount: Discount = "log2") -> FloatArray:
    """The discount factors 1/d_i for ranks 1..n (read only: remembered for the lengths of the last 256
    calls, as the stream scores list after list of the same k)."""
    return _discounts(n, discount)


@lru_cache(maxsize=256)
def _discounts(n: int, discount: Discount) -> FloatArray:
    ranks = np.arange(1, n + 1, dtype=np.float64)
    if discount == "log2":
        out = 1.0 / np.log2(ranks + 1.0)
    elif discount == "jk":
        out = np.ones(n, dtype=np.float64)
        out[1:] = 1.0 / np.log2(ranks[1:])
    else:
        raise ValueError(f"unknown discount {discount!r}; accepted: log2, jk")
    out.setflags(write=False)
    return out


def cg(gains: ArrayLike, k: int | None = None) -> float:
    """Cumulative gain of the top k."""
    return float(head(as_floats(gains, "gains"), k).sum())


def dcg(gains: ArrayLike, k: int | None = None, gain: Gain = "linear", discount: Discount = "log2") -> float:
    """Discounted cumulative gain of the top k (gains in rank order)."""
    top = transform_gains(head(as_floats(gains, "gains"), k), gain)
    return float(np.dot(top, discounts(top.size, discount)))


def ideal_dcg(
    pool: ArrayLike, k: int | None = None, gain: Gain = "linear", discount: Discount = "log2"
) -> float:
    """DCG of the best order of ``pool`` (every labelled document of the query)."""
    check_cutoff(k)
    ordered = -np.sort(-as_floats(pool, "pool"))
    return dcg(ordered, k, gain, discount)


def ndcg(
    gains: ArrayLike,
    pool: ArrayLike | None = None,
    k: int | None = None,
    gain: Gain = "linear",
    discount: Discount = "log2",
) -> float:
    """Normalised DCG; ``pool`` defaults to the list's own gains. Returns 0 when the ideal DCG is 0."""
    ideal = ideal_dcg(gains if pool is None else pool, k, gain, discount)
    if ideal == 0.0:
        return 0.0
    return dcg(gains, k, gain, discount) / ideal
