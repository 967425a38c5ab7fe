"""The checks that say when a verdict cannot be trusted as it stands: sample-ratio mismatch and covariate
imbalance, each an always-valid sequential test, so checking them at every look is allowed.

**Sample ratio** (canaries with a declared share p: ``share`` on ``canary_start`` and ``canary_share``
events). Under a working split every impression of the pair is the canary's with probability p, so the
canary's count x among the x + y impressions of both arms is binomial. Against it, the Bayes factor of a
beta-binomial mixture over the share, prior Beta(κp, κ(1 − p)),

    BF = B(κp + x, κ(1 − p) + y) / B(κp, κ(1 − p)) / (p^x (1 − p)^y)

is a nonnegative martingale with mean 1 under the declared share, so by Ville's inequality the mismatch
is declared when log BF ≥ log(1/α) at any look with probability ≤ α (α: ``CanaryConfig.check_alpha``,
half the verdict's, so that the two checks together raise a false alarm in at most α of comparisons);
the sequential multinomial test of Lindon & Malek 2022, *Anytime-valid inference for multinomial count
data*, NeurIPS, for two cells).
κ = (1 − p) / (p ρ²) − 1 makes the prior's spread of the share ρ · p, with ρ = ``mixture_sd`` (5%): tuned,
like the verdict's mixture, for mismatches of a few percent of the declared share. A share that changes
(a ramp: ``canary_share`` events) starts a new factor, and the product of the segments' factors is again
a test martingale; the epoch holding a change (the canary's start included) is left out, since its
impressions straddle two shares. Counts are impressions (every session shown, sampled or not), which the
split governs; the labelled sessions are a sample of them blind to the arm.

**Covariate balance** (comparisons adjusted for query difficulty). The covariate (the query's mean DCG@k
before the period) is fixed before the split, so under randomisation its mean is the same in both arms:
the arms' time-matched mean covariates (:mod:`.matched`, over the sessions with one) are compared like
the verdict's means, and an imbalance is declared at the first look whose confidence sequence of their
log ratio (at ``check_alpha``) excludes 0; every look counts. An imbalance means the arms see
different queries (a candidate that changes its traffic's mix, a routing bug): the adjusted comparison
then measures the change within queries, not of the per-session mean, and the verdict falls back to the
unadjusted comparison (:mod:`.judging`).

Both flags hold once raised (the tests are sequential: what was declared stays declared).

>>> round(float(log_ratio_bf(np.array(560.0), np.array(440.0), 0.5, 0.05)), 2)  # 56% against 50%
4.53
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.metric_paths import Balance
from monitor.core.canary.verdict_paths import FloatArray

CheckName = str  # "sample_ratio" or "covariate_balance"


@dataclass(frozen=True)
class Check:
    """One check of a comparison. ``flagged``: the test declared a mismatch at some look (and holds it);
    ``estimate``: the relative difference seen (sample ratio: the canary's observed share over the
    declared one, −1; balance: the candidate's mean covariate over the baseline's, −1); ``lower``,
    ``upper``: its (1 − α) confidence sequence where one is defined (balance); ``evidence``: the log Bayes
    factor (sample ratio) or log mixture likelihood ratio (balance) against "no mismatch", at the last
    look; ``expected``: the declared share (sample ratio); ``detail``: what was seen, in words;
    ``applicable``: False for a check that cannot apply to the comparison (a shadow's: :mod:`.shadow`),
    carried so that it reads "not applicable", never flagged, and left out of the exported series;
    ``declared``: False for a sample-ratio check without a declared share (``expected`` is then the share
    of the canary's first hour: :func:`.pairing.observed_ratio`)."""

    name: CheckName
    flagged: bool
    estimate: float | None
    lower: float | None
    upper: float | None
    evidence: float | None
    expected: float | None
    detail: str
    applicable: bool = True
    declared: bool = True


def _lbeta(a: FloatArray, b: FloatArray) -> FloatArray:
    out: FloatArray = np.vectorize(math.lgamma, otypes=[np.float64])(a)
    out = out + np.vectorize(math.lgamma, otypes=[np.float64])(b)
    out = out - np.vectorize(math.lgamma, otypes=[np.float64])(a + b)
    return out


SHARE_FLOOR = 1e-9  # a declared share is taken as at least this and at most 1 − this (5e-324 is valid JSON)


def _clamped(share: float) -> float:
    return min(max(share, SHARE_FLOOR), 1.0 - SHARE_FLOOR)


def concentration(share: float, rho: float) -> float:
    """κ: the prior Beta(κp, κ(1 − p)) has standard deviation ≈ ρ · p (at least 1)."""
    p = _clamped(share)
    return max((1.0 - p) / (p * rho * rho) - 1.0, 1.0)


def log_ratio_bf(canary: npt.ArrayLike, control: npt.ArrayLike, share: float, rho: float) -> FloatArray:
    """log BF of the beta-binomial mixture against the declared ``share`` (module docstring), per element
    of the cumulative counts ``canary`` and ``control``."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"share: must be strictly between 0 and 1, got {share!r}")
    x, y = np.asarray(canary, dtype=np.float64), np.asarray(control, dtype=np.float64)
    share = _clamped(share)
    kappa = concentration(share, rho)
    a, b = kappa * share, kappa * (1.0 - share)
    out: FloatArray = (_lbeta(a + x, b + y) - _lbeta(np.asarray(a), np.asarray(b))
                       - x * math.log(share) - y * math.log1p(-share))
    return out


@dataclass(frozen=True)
class Segment:
    """Impressions per look of one stretch of constant declared ``share``: the canary's and the
    control's counts per look (the epochs of the stretch, cumulative within it)."""

    share: float
    canary: FloatArray
    control: FloatArray


def sample_ratio(segments: list[Segment], looks: int, alpha: float, rho: float) -> Check | None:
    """The sample-ratio check over ``looks`` looks from the segments (each with arrays of the looks'
    *per-look* counts, 0 where the look is not in the segment or is left out); None without any
    impression in a segment."""
    if not segments:
        return None
    log_bf = np.zeros(looks)
    seen_x = seen_y = 0.0
    expected = 0.0
    for segment in segments:
        x, y = np.cumsum(segment.canary), np.cumsum(segment.control)
        log_bf = log_bf + log_ratio_bf(x, y, segment.share, rho)
        seen_x, seen_y = seen_x + float(x[-1]), seen_y + float(y[-1])
        expected += float(x[-1] + y[-1]) * segment.share
    if seen_x + seen_y <= 0:
        return None
    flagged = bool((log_bf >= math.log(1.0 / alpha)).any())
    total = seen_x + seen_y
    declared = expected / total
    observed = seen_x / total
    relative = observed / declared - 1.0
    shares = sorted({s.share for s in segments})
    said = "/".join(f"{s:.1%}" for s in shares)
    detail = (f"the canary has {observed:.2%} of {total:,.0f} impressions against {said} declared "
              f"({relative:+.1%}); log BF {float(log_bf[-1]):.1f}"
              + (f", mismatch declared (≥ log(1/α) = {math.log(1 / alpha):.1f})" if flagged else ""))
    return Check("sample_ratio", flagged, relative, None, None, float(log_bf[-1]), declared,
                 detail.replace("-", "−"))


def balance_check(balance: Balance, config: CanaryConfig) -> Check:
    """The balance check of one comparison from its :class:`~.metric_paths.Balance` along the looks
    (module docstring): flagged from the first look whose confidence sequence excludes 0."""
    off = np.atleast_1d(balance.off)
    flagged = bool(off.any())
    defined = np.flatnonzero(np.isfinite(np.atleast_1d(balance.estimate)))
    last = int(defined[-1]) if defined.size else -1

    def at(values: FloatArray) -> float | None:
        value = float(np.atleast_1d(values)[last])
        return value if math.isfinite(value) else None

    estimate, lower, upper = at(balance.estimate), at(balance.lower), at(balance.upper)
    n_b, n_c = (int(np.atleast_1d(n)[last]) for n in (balance.n_baseline, balance.n_candidate))
    shown = "undefined" if estimate is None else f"{estimate:+.1%}"
    interval = "" if lower is None or upper is None else f" [{lower:+.1%}, {upper:+.1%}]"
    first = int(np.flatnonzero(off)[0]) + 1 if flagged else None
    detail = (f"the candidate's sessions' queries have a mean covariate (the query's DCG@k before the "
              f"period) {shown}{interval} against the baseline's, over {n_c:,} and {n_b:,} sessions with one"
              + (f"; imbalance declared at look {first}" if flagged else ""))
    return Check("covariate_balance", flagged, estimate, lower, upper, at(balance.evidence), None,
                 detail.replace("-", "−"))
