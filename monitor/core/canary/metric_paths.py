"""Each metric's verdict along the looks, from arrays of cumulative sums: what :mod:`.judging` runs for one
comparison and the benchmarks run for thousands of simulated ones at once (any leading axes: runs).

Inputs are arrays of shape (..., looks, strata, fields), cumulative over the looks, the fields in the order
of :func:`.matched.fields_of`; a DCG comparison adjusted for query difficulty also takes each arm's sums
over its sessions with a covariate (n, Σx, Σx², Σc, Σc², Σxc: shape (..., looks, strata, 6)).

* :func:`dcg_paths`: the time-matched mean DCG, adjusted (:mod:`.adjusted`) while the arms' covariates are
  in balance (:func:`balance_path`); from the first look whose balance test declares an imbalance on, the
  unadjusted comparison (its own sticky path over all the looks, so what it shows from then on is what it
  would have shown all along). Arms at 0 are bounded exactly (:mod:`.bounds`).
* :func:`pnr_paths`: concordant over discordant pairs (grade-tied pairs left out), guarded by the pairs of
  different grades per session: a pass needs them not 2% fewer in the candidate either; no such pair at
  all in the candidate's lists, while the baseline's have them, is a regression (module docstring of
  :mod:`.judging`).

Every path here is :func:`.verdict_paths.effect_verdict_path`'s (with :func:`.bounds.with_bounds` for arms
at 0), so each regression (DCG adjusted or not, PNR, the guard behind "nothing to order") is decided on an
upper end at ``CanaryConfig.regression_alpha`` (α / 2: the pair's two metrics share α for regressions) and
each pass on a lower end at α.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.canary.adjusted import CovariateSums, adjusted_mean_paths
from monitor.core.canary.bounds import with_bounds
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.covariates import covariate_sums
from monitor.core.canary.matched import matched_mean_paths, matched_paths, pnr_components
from monitor.core.canary.sequential import half_widths, log_ratios
from monitor.core.canary.verdict_paths import (
    INCONCLUSIVE,
    PASS,
    REGRESSION,
    EffectPath,
    FloatArray,
    LogPath,
    VerdictPath,
    changes_of,
    effect_verdict_path,
    sticky_path,
)

BoolArray = npt.NDArray[np.bool_]


def decide(effect: EffectPath, config: CanaryConfig) -> VerdictPath:
    """The verdict path of an effect, sticky with ``config.sticky``."""
    path = effect_verdict_path(effect, config)
    return sticky_path(path, config) if config.sticky else path


def select(mask: npt.ArrayLike, a: VerdictPath, b: VerdictPath) -> VerdictPath:
    """Per look: ``a`` where ``mask``, else ``b`` (changes counted on the result)."""
    m = np.asarray(mask, dtype=bool)
    code = np.where(m, a.code, b.code).astype(np.int8)
    return VerdictPath(np.where(m, a.estimate, b.estimate), np.where(m, a.lower, b.lower),
                       np.where(m, a.upper, b.upper), np.where(m, a.evidence, b.evidence), code,
                       np.where(m, a.eligible, b.eligible), changes_of(code), np.where(m, a.resets, b.resets))


@dataclass(frozen=True)
class Balance:
    """The balance test along the looks: the log ratio of the arms' mean covariates, its confidence sequence
    at ``check_alpha`` and evidence, and ``off``: the looks whose sequence excludes 0 (with
    ``min_sessions`` with a covariate in both arms)."""

    estimate: FloatArray
    lower: FloatArray
    upper: FloatArray
    evidence: FloatArray
    off: BoolArray
    n_baseline: FloatArray
    n_candidate: FloatArray


def balance_path(baseline: CovariateSums, candidate: CovariateSums, config: CanaryConfig) -> Balance:
    """The covariate-balance test (:mod:`.checks`) at every look."""
    base, cand = matched_mean_paths(baseline.n, baseline.c, baseline.cc, candidate.n, candidate.c,
                                    candidate.cc)
    theta = np.asarray(cand.value - base.value, dtype=np.float64)
    v = np.asarray(base.variance + cand.variance, dtype=np.float64)
    h = half_widths(v, config.mixture, config.check_alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        evidence = log_ratios(np.where(np.isfinite(theta), theta, 0.0), v, config.mixture)
        enough = ((base.n >= config.min_sessions) & (cand.n >= config.min_sessions) & np.isfinite(theta)
                  & np.isfinite(h))
        off = enough & ((theta - h > 0.0) | (theta + h < 0.0))
    return Balance(np.expm1(theta), np.expm1(theta - h), np.expm1(theta + h), evidence, off, base.n, cand.n)


@dataclass(frozen=True)
class DcgPaths:
    """A DCG comparison along the looks: ``path`` the verdict users see (adjusted until an imbalance is
    declared, unadjusted from then on); ``plain`` the arms' unadjusted log means; ``adjusted_n`` the
    sessions each arm counts; ``balance`` the balance test (None: not adjusted); ``imbalanced`` per look,
    whether an imbalance was declared by then."""

    path: VerdictPath
    plain: tuple[LogPath, LogPath]
    n_baseline: FloatArray
    n_candidate: FloatArray
    balance: Balance | None = None
    imbalanced: BoolArray | None = None


def dcg_paths(base: npt.ArrayLike, cand: npt.ArrayLike, config: CanaryConfig, bound: float | None,
              base_c: npt.ArrayLike | None = None, cand_c: npt.ArrayLike | None = None) -> DcgPaths:
    """The DCG verdict path (module docstring); ``base_c``, ``cand_c``: the arms' sums over their sessions
    with a covariate (None: unadjusted)."""
    b, c = np.asarray(base, dtype=np.float64), np.asarray(cand, dtype=np.float64)
    plain_b, plain_c = matched_mean_paths(*(b[..., i] for i in range(3)), *(c[..., i] for i in range(3)))
    plain = decide(with_bounds(EffectPath.of(plain_b, plain_c), [(plain_b, bound, 1.0)],
                               [(plain_c, bound, 1.0)], config), config)
    if base_c is None or cand_c is None:
        return DcgPaths(plain, (plain_b, plain_c), plain_b.n, plain_c.n)
    sums_b, sums_c = covariate_sums(b, np.asarray(base_c, dtype=np.float64)), covariate_sums(
        c, np.asarray(cand_c, dtype=np.float64))
    balance = balance_path(sums_b, sums_c, config)
    imbalanced = np.logical_or.accumulate(balance.off, axis=-1)
    adj_b, adj_c = adjusted_mean_paths(sums_b, sums_c)
    adjusted = decide(with_bounds(EffectPath.of(adj_b, adj_c), [(adj_b, bound, 1.0)], [(adj_c, bound, 1.0)],
                                  config), config)
    return DcgPaths(select(imbalanced, plain, adjusted), (plain_b, plain_c),
                    np.where(imbalanced, plain_b.n, adj_b.n), np.where(imbalanced, plain_c.n, adj_c.n),
                    balance, imbalanced)


@dataclass(frozen=True)
class PnrPaths:
    """A PNR comparison along the looks: ``path`` the verdict; ``pnr`` PNR's own (without the guard) and
    ``pairs`` the guard's paths; ``nothing`` where the candidate's lists have no pair of different grades
    while the baseline's do (a regression); ``components`` the arms' concordant and discordant pairs per
    session, each as a log mean (for the reason of a missing interval)."""

    path: VerdictPath
    pnr: VerdictPath
    pairs: VerdictPath
    nothing: BoolArray
    n_baseline: FloatArray
    n_candidate: FloatArray
    components: tuple[tuple[LogPath, LogPath], tuple[LogPath, LogPath]]


def pnr_paths(base: npt.ArrayLike, cand: npt.ArrayLike, pairs_base: npt.ArrayLike, pairs_cand: npt.ArrayLike,
              config: CanaryConfig, bound: float | None) -> PnrPaths:
    """The PNR verdict path (module docstring) from the arms' ``pnr`` and ``pairs`` sums."""
    pnr_b, pnr_c = matched_paths(base, cand, "pnr")
    (con_b, con_c), (dis_b, dis_c) = pnr_components(base, cand)
    pnr = decide(with_bounds(EffectPath.of(pnr_b, pnr_c), [(con_b, bound, 1.0), (dis_b, bound, -1.0)],
                             [(con_c, bound, 1.0), (dis_c, bound, -1.0)], config), config)
    pairs_b, pairs_c = matched_paths(pairs_base, pairs_cand, "pairs")
    guard = decide(with_bounds(EffectPath.of(pairs_b, pairs_c), [(pairs_b, bound, 1.0)],
                               [(pairs_c, bound, 1.0)], config), config)
    none = np.zeros(np.shape(pairs_c.n), dtype=bool)
    zero_c = none if pairs_c.zero is None else pairs_c.zero
    empty = zero_c & ~(none if pairs_b.zero is None else pairs_b.zero)
    path, nothing = guarded(pnr, guard, empty)
    return PnrPaths(path, pnr, guard, nothing, pnr_b.n, pnr_c.n, ((con_b, con_c), (dis_b, dis_c)))


def guarded(pnr: VerdictPath, guard: VerdictPath, empty: BoolArray) -> tuple[VerdictPath, BoolArray]:
    """PNR's verdict path guarded by the pairs of different grades per session (module docstring), and
    where it is a regression because the candidate's lists have none at all (``empty``: the candidate has
    no such pair while the baseline has; proven once the guard is a regression)."""
    nothing = (guard.code == REGRESSION) & empty
    code = np.where(pnr.code == REGRESSION, REGRESSION, INCONCLUSIVE).astype(np.int8)
    code[nothing] = REGRESSION
    code[(pnr.code == PASS) & (guard.code == PASS)] = PASS
    take = nothing & (pnr.code != REGRESSION)
    path = VerdictPath(np.where(take, guard.estimate, pnr.estimate), np.where(take, guard.lower, pnr.lower),
                       np.where(take, guard.upper, pnr.upper), np.where(take, np.nan, pnr.evidence), code,
                       pnr.eligible | nothing, changes_of(code), pnr.resets)
    return path, nothing
