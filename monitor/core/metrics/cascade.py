"""Cascade user models: RBP (Moffat & Zobel 2008) and ERR (Chapelle et al. 2009; seed 003).

    RBP(p)  = (1 − p) Σ_i g_i p^(i−1)                        (g in [0, 1]: the scale's gains)
    ERR@k   = Σ_{r≤k} (1/r) R_r Π_{i<r} p (1 − R_i),  R = (2^level − 1) / 2^max_level

p in ERR is seed 003's continuation probability: after an unsatisfying document the user goes on with
probability p (p = 1 is Chapelle's original ERR).

>>> round(rbp([1, 0, 1], 0.5), 4)
0.625
>>> round(err([3, 0], max_level=3), 4)
0.875
"""

from __future__ import annotations

import numpy as np

from monitor.core.metrics._arrays import ArrayLike, FloatArray, as_floats, head


def _check_probability(p: float, name: str, allow_one: bool) -> None:
    upper_ok = p <= 1.0 if allow_one else p < 1.0
    if not (p > 0.0 and upper_ok):
        bound = "(0, 1]" if allow_one else "(0, 1)"
        raise ValueError(f"{name} must be in {bound}, got {p!r}")


def rbp(gains: ArrayLike, p: float, k: int | None = None) -> float:
    _check_probability(p, "RBP persistence p", allow_one=False)
    top = head(as_floats(gains, "gains"), k)
    return float((1.0 - p) * np.dot(top, np.power(p, np.arange(top.size, dtype=np.float64))))


def satisfaction(levels: FloatArray, max_level: float) -> FloatArray:
    """R = (2^level − 1) / 2^max_level, negative levels clamped to 0."""
    if max_level <= 0:
        return np.zeros(levels.size, dtype=np.float64)
    out: FloatArray = (np.exp2(np.maximum(levels, 0.0)) - 1.0) / np.exp2(max_level)
    return out


def err(levels: ArrayLike, max_level: float, k: int | None = None, p: float = 1.0) -> float:
    _check_probability(p, "ERR continuation probability p", allow_one=True)
    r = satisfaction(head(as_floats(levels, "levels"), k), max_level)
    reach = np.cumprod(np.r_[1.0, p * (1.0 - r[:-1])]) if r.size else r
    ranks = np.arange(1, r.size + 1, dtype=np.float64)
    return float(np.sum(reach * r / ranks))
