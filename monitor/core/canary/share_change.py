"""Has a share changed since a comparison's start? An always-valid test without a declared share (issue 42):
the sample-ratio check of a canary that declared none, and the share of the served sessions a shadow
candidate's lists reach.

Each look i adds counts ``x_i`` of ``n_i`` (a canary's impressions of the pair's; the served sessions
carrying the candidate's list). Under "no change" every one of them is a success with the same unknown
probability p; the first ``reference`` looks (the comparison's first hour) say what it is. The evidence is
the universal-inference e-value of Wasserman, Ramdas & Balakrishnan (2020, *Universal inference*, PNAS):

    W_t = q(x_1 … x_t) / max_p Π_i Bin(x_i; n_i, p)

with q any joint distribution of the counts fixed in advance: here the Bayes mixture that draws the
reference looks' share from a uniform prior, and the later looks' share from a prior of ``strength``
pseudo-counts at the reference's share (beta-binomial predictive distributions, look after look). For any
p, q over the likelihood at p is a nonnegative martingale with mean 1, and the maximum over p is at least
that likelihood, so W_t stays below it: by Ville's inequality W_t ≥ 1/α at any look has probability ≤ α
under no change, however often it is looked at and whatever p is. A later share away from the reference's
makes W grow like exp(n · KL); ``side="below"`` counts a crossing only while the later share is below the
reference's (a subset of the crossings: still ≤ α).

What it cannot see: a share that was already wrong in the reference looks (nothing was declared to
compare it with). How fast it sees a change is bounded by how well the reference looks measured the share:
the evidence is at most about the reference's count times the divergence of the two shares.

>>> import numpy as np
>>> same = log_evidence(np.full(24, 5000.0), np.full(24, 10000.0), 4, "both")
>>> fell = log_evidence(np.r_[np.full(4, 5000.0), np.full(20, 4550.0)], np.full(24, 10000.0), 4, "both")
>>> bool(same[-1] < 0), bool(fell[-1] > 20)
(True, True)
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
STRENGTH = 200.0  # pseudo-counts of the later looks' prior at the reference share


def _lbeta(a: FloatArray, b: FloatArray) -> FloatArray:
    out: FloatArray = np.vectorize(math.lgamma, otypes=[np.float64])(a)
    out = out + np.vectorize(math.lgamma, otypes=[np.float64])(b) - np.vectorize(
        math.lgamma, otypes=[np.float64])(a + b)
    return out


def _loglik(x: FloatArray, n: FloatArray, p: FloatArray) -> FloatArray:
    """Σ x log p + (n − x) log(1 − p), 0 · log 0 taken as 0 (the binomial coefficients cancel)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(x > 0, x * np.log(p), 0.0)
        b = np.where(n - x > 0, (n - x) * np.log1p(-p), 0.0)
    out: FloatArray = a + b
    return out


def log_evidence(x: npt.ArrayLike, n: npt.ArrayLike, reference: int, side: str = "both",
                 strength: float = STRENGTH) -> FloatArray:
    """log W_t at every look (module docstring) from per-look counts ``x`` of ``n`` (not cumulative);
    ``side="below"``: −inf where the later looks' share is not below the reference's."""
    if side not in ("both", "below"):
        raise ValueError(f"side: {side!r} is not one of both, below")
    x, n = np.asarray(x, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if x.shape != n.shape or x.ndim != 1:
        raise ValueError("x, n: expected two counts per look")
    if np.any(x < 0) or np.any(x > n):
        raise ValueError("x, n: need 0 ≤ x ≤ n at every look")
    reference = max(0, min(reference, x.size))
    before_x = np.concatenate([[0.0], np.cumsum(x)[:-1]])
    before_n = np.concatenate([[0.0], np.cumsum(n)[:-1]])
    a, b = before_x + 1.0, before_n - before_x + 1.0  # the reference looks: a uniform prior, updated
    ref_x, ref_n = float(x[:reference].sum()), float(n[:reference].sum())
    share = (ref_x + 1.0) / (ref_n + 2.0)
    later_x, later_n = before_x - ref_x, before_n - ref_n  # (over the later looks)
    a = np.where(np.arange(x.size) < reference, a, later_x + strength * share)
    b = np.where(np.arange(x.size) < reference, b, later_n - later_x + strength * (1.0 - share))
    numerator = np.cumsum(_lbeta(a + x, b + n - x) - _lbeta(a, b))
    total_x, total_n = np.cumsum(x), np.cumsum(n)
    best = np.where(total_n > 0, total_x / np.maximum(total_n, 1.0), 0.5)
    out: FloatArray = numerator - _loglik(total_x, total_n, best)
    if side == "below":
        seen_x, seen_n = np.cumsum(x) - ref_x, np.cumsum(n) - ref_n
        below = (np.arange(x.size) >= reference) & (seen_n > 0) & (
            seen_x < share * np.where(seen_n > 0, seen_n, 1.0))
        out = np.where(below, out, -np.inf)
    return out
