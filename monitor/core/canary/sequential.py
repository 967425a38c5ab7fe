"""The normal-mixture confidence sequence for an effect θ estimated by θ̂ with variance v.

Mixing the likelihood ratio of θ̂ ~ N(θ, v) against θ₀ over θ ~ N(θ₀, τ²) gives the mixture likelihood ratio
(mSPRT: Robbins 1970; Johari, Koomen, Pekelis & Walsh 2017, "Peeking at A/B tests", KDD, §4):

    Λ(θ₀) = √(v / (v + τ²)) · exp( τ² (θ̂ − θ₀)² / (2 v (v + τ²)) )

which is a nonnegative martingale under θ = θ₀ when v is the variance of a Gaussian process' running mean.
By Ville's inequality P(∃ t: Λ_t(θ) ≥ 1/α) ≤ α, so {θ₀ : Λ(θ₀) < 1/α} is a (1 − α) confidence
*sequence*, valid at every look:

    θ̂ ± √( v (v + τ²) / τ² · (2 log(1/α) + log((v + τ²) / v)) )

This is the two-sided normal-mixture boundary of Howard, Ramdas, McAuliffe & Sekhon (2021, "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2), §3.5: √((V + ρ) log((V + ρ) /
(ρ α²))) on the sum S with intrinsic time V) written for the mean, with V = 1/v and ρ = 1/τ². With v the
*estimated* variance of a mean it is the asymptotic confidence sequence of Waudby-Smith, Arnold, Wu,
Ramdas & Howard (2021, "Time-uniform central limit theory and asymptotic confidence sequences",
arXiv:2103.06476, Thm 2.2: μ̂_t ± √(2(tσ̂²ρ² + 1)/(t²ρ²) · log(√(tσ̂²ρ² + 1)/α)), the same expression with
v = σ̂²/t and their ρ = τ/σ̂²).

The boundary is tightest, for a given τ, at v ≈ τ² / (2 log(1/α) + log(1 + 2 log(1/α))) (ibid., §3.5):
for α = 0.05 at a standard error of τ / 2.82, where the half-width is ≈ 1.07 τ.

>>> round(half_width(0.01 ** 2, 0.05, 0.05), 5)
0.03102
>>> round(log_mixture_ratio(0.0, 0.01 ** 2, 0.05), 4)  # no effect seen: evidence for "no change"
-1.629
"""

from __future__ import annotations

import math


def half_width(variance: float, tau: float, alpha: float) -> float:
    """Half-width of the (1 − α) normal-mixture confidence sequence around θ̂ (module docstring)."""
    if variance <= 0.0:
        raise ValueError(f"variance: must be > 0, got {variance!r}")
    spread = variance + tau * tau
    log_terms = 2.0 * math.log(1.0 / alpha) + math.log(spread / variance)
    return math.sqrt(variance * spread / (tau * tau) * log_terms)


def log_mixture_ratio(estimate: float, variance: float, tau: float, null: float = 0.0) -> float:
    """log Λ(null): the log mixture likelihood ratio of "θ ≠ null" against "θ = null".

    ``log Λ ≥ log(1/α)`` exactly when ``null`` lies outside the confidence sequence."""
    if variance <= 0.0:
        raise ValueError(f"variance: must be > 0, got {variance!r}")
    spread = variance + tau * tau
    gap = estimate - null
    return 0.5 * math.log(variance / spread) + tau * tau * gap * gap / (2.0 * variance * spread)
