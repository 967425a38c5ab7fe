"""Exact bounds for an arm whose every session scored 0: a totally broken ranker is a regression at once.

The log ratio θ = log m_candidate − log m_baseline of :mod:`.estimates` is undefined when an arm's mean is
0 (a ranker returning nothing relevant: every session's DCG@k is 0; a ranker whose lists order no pair
right: PNR 0), so the asymptotic confidence sequence says nothing there, however many sessions show it.
Yet n sessions that all scored 0 bound the arm's true mean exactly, without any distributional
assumption, because a session's value is bounded: 0 ≤ x ≤ B (DCG@k ≤ the best gain · Σ_{i≤k} 1/log2(i+1);
a pair count ≤ k(k − 1)/2: ``CanaryConfig.dcg_bound``, ``pairs_bound``).

**The bound.** For a hypothesised mean μ₀ < B, the capital of a bettor who stakes everything against
"mean ≥ μ₀", K_n = Π_i (B − x_i) / (B − μ₀), is a nonnegative martingale with K₀ = 1 when the mean is μ₀
(each factor has expectation 1), so by Ville's inequality P(∃ n: K_n ≥ 1/α) ≤ α (the betting confidence
sequences of Waudby-Smith & Ramdas 2024, *Estimating means of bounded random variables by betting*,
JRSS B 86(1), with a constant bet). After n sessions at 0, K_n = (B / (B − μ₀))ⁿ ≥ 1/α exactly when

    μ₀ ≥ U_n = B · (1 − α^(1/n))          (≈ B · log(1/α) / n)

so [0, U_n] covers the arm's mean at every n at once with probability ≥ 1 − α. With 200 sessions (the
default ``min_sessions``) and the level a regression reads (α / 2 / 100 = 2.5e-4 at the default α, split
between the two arms: 1.25e-4), U is 4.4% of B: 0.49 for head DCG@40, 0.31 for tail DCG@20, against
realistic means of 1.2–2.2.

**The effect.** An arm's statistic is a product of components (DCG: its mean; PNR: concordant pairs per
session over discordant pairs per session), each either at 0 (the bound above: log in [−∞, log U]) or not
(its own normal-mixture confidence sequence on the log scale, :mod:`.sequential`, from the component's
time-matched mean and variance). θ's interval is the sum of the components' (interval arithmetic): its
lower end from each component's end at α_b / m for the m components of both arms, α_b =
``CanaryConfig.bound_alpha``, its upper end from each component's end at α_r / m, α_r =
``CanaryConfig.regression_bound_alpha`` = α_b / 2. The union bound keeps θ below the lower end at any
look with probability ≤ α_b (a false pass), above the upper end with probability ≤ α_r (a false
regression), and with the confidence sequence at ``sequence_alpha`` = α − α_b and
``regression_sequence_alpha`` = α / 2 − α_r a false pass stays below α and a false regression below α / 2
(the pair's two metrics share α for regressions: :class:`.CanaryConfig`). These bounds stand in only
where θ̂ is undefined (a component is 0); elsewhere the sequence decides, as before.

>>> import numpy as np
>>> round(float(np.exp(zero_mean_upper(np.array(200.0), 11.09, 0.05 / 2 / 100 / 2))), 3)  # head, 200 zeros
0.487
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.sequential import Mixture, half_widths
from monitor.core.canary.verdict_paths import EffectPath, FloatArray, LogPath


def _f(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def zero_mean_upper(n: npt.ArrayLike, bound: float, alpha: float) -> FloatArray:
    """log U_n: the log of the (1 − α) time-uniform upper bound of the mean of values in [0, ``bound``]
    after ``n`` sessions that all were 0 (module docstring); NaN where n < 1."""
    n = _f(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = -np.expm1(np.log(alpha) / np.maximum(n, 1))  # 1 − α^(1/n)
        out: FloatArray = np.where(n >= 1, np.log(bound) + np.log(share), np.nan)
    return out


def interval(path: LogPath, bound: float | None, mixture: Mixture, alpha: float
             ) -> tuple[FloatArray, FloatArray]:
    """The (1 − α) interval of a component's log mean per element: its normal-mixture confidence sequence
    where its log and variance are defined, [−∞, log U] where it is 0 (and a ``bound`` is known), NaN
    elsewhere."""
    value, variance = _f(path.value), _f(path.variance)
    h = half_widths(variance, mixture, alpha)
    defined = np.isfinite(value) & np.isfinite(h)
    lo, hi = np.where(defined, value - h, np.nan), np.where(defined, value + h, np.nan)
    if path.zero is not None and bound is not None:
        lo = np.where(path.zero, -np.inf, lo)
        hi = np.where(path.zero, zero_mean_upper(path.n, bound, alpha), hi)
    return lo, hi


Component = tuple[LogPath, float | None, float]  # (the component's log-mean path, its bound, +1 or −1)


def with_bounds(effect: EffectPath, baseline: Sequence[Component], candidate: Sequence[Component],
                config: CanaryConfig) -> EffectPath:
    """``effect`` with the exact bounds of θ = Σ_candidate sign · log component − Σ_baseline sign · log
    component where a component is 0 (module docstring): the lower bound at ``config.bound_alpha``, the
    upper at ``config.regression_bound_alpha``, each split among the components; elsewhere (θ̂ defined, or
    no component at 0) the bounds are NaN and the confidence sequence decides."""
    parts = [(path, bound, sign) for path, bound, sign in candidate]
    parts += [(path, bound, -sign) for path, bound, sign in baseline]
    below, above = config.bound_alpha / len(parts), config.regression_bound_alpha / len(parts)
    shape = np.shape(effect.theta)
    lower, upper = np.zeros(shape), np.zeros(shape)
    any_zero = np.zeros(shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for path, bound, sign in parts:
            low, high = interval(path, bound, config.mixture, below)  # ends at the pass's level
            low_r, high_r = interval(path, bound, config.mixture, above)  # ends at the regression's level
            lower = lower + (low if sign > 0 else -high)
            upper = upper + (high_r if sign > 0 else -low_r)
            if path.zero is not None and bound is not None:
                any_zero |= np.broadcast_to(path.zero, shape)
    keep = any_zero & ~np.isfinite(_f(effect.theta))
    return EffectPath(effect.theta, effect.variance, effect.n_baseline, effect.n_candidate,
                      np.where(keep, lower, np.nan), np.where(keep, upper, np.nan))
