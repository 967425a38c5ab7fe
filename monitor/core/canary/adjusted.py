"""Adjusting the canary comparison for query difficulty: regression adjustment (CUPED) within time strata.

Most of the spread of a session's DCG@k is which query it was (60–65% of its variance in the realistic
simulated world, ``monitor/sim/world.py``). A covariate that measures the query's difficulty and that
the canary cannot have changed removes that share from the comparison without moving its target, as
long as both arms see the same mix of queries ("What it estimates" below).

**The covariate.** For a session of query q, c is q's mean DCG@k over the scored sessions of a period
*before* the comparison's (the baseline's history: ``query_covariate``); a query with fewer than
``min_sessions`` such sessions has none. Fixed before the split, c is independent of the arm a session
was randomised to, so E[c] is the same in both arms: that is all the adjustment needs (it need not be a
good predictor; a poor one just removes less variance).

**The estimator.** Per arm a ∈ {b (baseline), c (candidate)} and time stratum h (the strata of
:mod:`.matched`: hours since a canary's start), the sums a stream can keep by addition: over the sessions
*with* a covariate n, Σx, Σx², Σc, Σc², Σxc, over those *without* n₀, Σx₀, Σx₀² (:class:`CovariateSums`).
With each arm's slope β_a and the pooled covariate mean of the stratum μ_h (both arms' sessions with a
covariate), every session gets the adjusted value

    u = x − β_a (c − μ_h)     (sessions with a covariate)
    u = x                     (sessions without: their stratum's plain, unadjusted contribution)

and the arm's adjusted mean in stratum h is the mean of u, m̂_a,h = (Σx + Σx₀ − β_a (Σc − n μ_h)) /
(n + n₀). The two arms are then compared as :mod:`.matched` compares plain means: over the strata S both
arms have, with the candidate's weights w_h = n_c,h / n_c,

    m_c = Σ_S w_h m̂_c,h,    m_b* = Σ_S w_h m̂_b,h,    θ̂ = log m_c − log m_b*

With β = 0 this is exactly :func:`.matched.matched_mean_paths` (and with one stratum the plain
comparison of :mod:`.estimates`). The difference of adjusted means is the CUPED estimator (Deng, Xu,
Kohavi & Walker 2013, *Improving the sensitivity of online controlled experiments by utilizing
pre-experiment data*, WSDM) in its fully interacted form, a slope per arm with the covariate centred at
the pooled mean (Lin 2013, *Agnostic notes on regression adjustments to experimental data: reexamining
Freedman's critique*, Ann. Appl. Stat. 7(1), §3–4), here per stratum and on the log scale.

**β_a** is each arm's own least-squares slope of x on c over its sessions with a covariate, pooled over
the strata both arms have (:func:`arm_slopes`), within strata so the time of day does not leak into it:

    β̂_a = Σ_h (Σxc − Σx Σc / n)_a,h / Σ_h (Σc² − (Σc)² / n)_a,h

0 where the covariate does not vary. Why a slope per arm: Lin (2013, Thm 2) shows the interacted
estimator consistent and asymptotically never less precise than the unadjusted difference, whatever the
arms' sizes and slopes, while one slope pooled over both arms can be less precise when the arms differ
in size *and* in slope. That is the case the monitor exists for: a broken candidate's DCG no longer
follows its query's difficulty (slope near 0), and a pooled slope (mostly the baseline's, at a 5% canary)
subtracts the covariate's spread from sessions that never had it, adding it to the candidate's variance
instead of removing it: 99% broken, a head deploy took 9.25 hours to a regression with a pooled slope and
1.25 with no adjustment (issue 26). :func:`pooled_slope` is kept for comparison.

**What it estimates.** Under randomisation E[c] is the same in both arms, so the adjusted and unadjusted
comparisons estimate the same θ, the change of the per-session mean. When the arms' query mixes differ
(a candidate that changes which queries reach it: users reformulating after bad results, a routing bug),
they do not: the adjustment then removes the mix's share and measures the change *within* queries, while
the per-session mean also moves with the mix. :mod:`.checks` tests the arms' covariate means for such an
imbalance, and the verdict then falls back to the unadjusted comparison (docs/canary.md).

**Variance.** Conditional on the stratum counts (as in :mod:`.matched`), with u's sample variance s²_u,h
in each stratum (the arm's pooled within-stratum one for a stratum of one session):

    Var(m_c) = Σ_S w_h² s²_u,c,h / n_c,h,    Var(m_b*) = Σ_S w_h² s²_u,b,h / n_b,h
    Var(θ̂) = Var(m_c) / m_c² + Var(m_b*) / m_b*²

computed from the sums: Σu = Σx + Σx₀ − β (Σc − n μ), Σu² = Σx² + Σx₀² − 2β (Σxc − μ Σx) + β² (Σc² −
2μ Σc + n μ²). s²_u ≈ (1 − ρ²) s²_x for the sessions with a covariate (ρ: the correlation of x and c),
which is where the gain comes from. Two sources of error are left out, both of smaller order: β̂'s own
sampling error (it multiplies the difference of the arms' covariate means, itself O(1/√n), so it is
O(1/n); Deng et al. 2013, §3.3), and μ_h's (it cancels in a difference of means; on the log scale its
coefficient is β w_h (π_c,h / m_c − π_b,h / m_b*), π the share of sessions with a covariate, which is
proportional to the effect: below 0.2% of the variance for effects up to 10% in the simulated world).
``tests/unit/test_canary_adjusted.py`` checks the variance against the spread of simulated estimates.

**Always valid still?** θ̂ is a smooth function of running means (of x, c, c², xc per stratum and arm),
like the unadjusted log ratio, so the asymptotic confidence sequence of Waudby-Smith, Arnold, Wu, Ramdas &
Howard (2021, *Time-uniform central limit theory and asymptotic confidence sequences*) applies to it
unchanged, with its variance above; Lindon, Ham, Tingley & Bojinov (2022, *Anytime-valid linear models and
regression adjusted causal inference in randomized experiments*) give the regression-adjusted sequential
test in general. :func:`adjusted_mean_path` returns an :class:`~.paths.EffectPath`, so
:func:`~.paths.effect_verdict_path` and :func:`~.paths.sticky_path` apply as they are. A/A Monte Carlo
(the tests, and ``benchmarks/judgments.py`` in the realistic world under continuous monitoring): false
regressions stay ≤ α.

**Assumptions.** (1) The covariate is fixed before the comparison's period (the history is cut at its
start) and does not depend on the arm: a covariate that included the period's own sessions would carry
the effect into the adjustment and bias it towards 0. (2) Sessions are sampled blind to the arm (the
stream's rule: bucket and time only), so each arm's sessions are a random sample of its traffic and
share the covariate's distribution. (3) Sessions are independent given their strata (as for the
unadjusted test; sessions of one query are correlated through the query, which the covariate partly
explains, but a random split puts them in both arms alike). (4) Large enough arms: the interval is
asymptotic (``min_sessions``).

Pure: numpy only, no I/O.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> c = rng.gamma(2.0, 1.0, 4000)                       # each session's query difficulty
>>> x = c * rng.gamma(4.0, 0.25, 4000)                  # its DCG: mostly which query it was
>>> arm = np.arange(4000) % 2 == 1
>>> base = CovariateSums.of_sessions(x[~arm], c[~arm], np.zeros(2000, dtype=np.int64), 1)
>>> cand = CovariateSums.of_sessions(x[arm], c[arm], np.zeros(2000, dtype=np.int64), 1)
>>> plain, adjusted = adjusted_mean_path(base, cand, slope=0.0), adjusted_mean_path(base, cand)
>>> bool(adjusted.variance[()] < 0.5 * plain.variance[()])   # the query's share of the variance is gone
True
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from monitor.core.canary.matched import _Strata, matched_mean_paths
from monitor.core.canary.verdict_paths import EffectPath, FloatArray, LogPath

IntArray = npt.NDArray[np.int64]
FIELDS = ("n", "x", "xx", "c", "cc", "xc", "n0", "x0", "xx0")


def _f(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class CovariateSums:
    """One arm's sums per stratum (the last axis; any leading axes: looks, runs): over the sessions with a
    covariate ``n``, Σx ``x``, Σx² ``xx``, Σc ``c``, Σc² ``cc``, Σxc ``xc``; over those without ``n0``,
    Σx ``x0``, Σx² ``xx0``. Field sums: they merge by addition (epochs, partitions, cumulative sums)."""

    n: FloatArray
    x: FloatArray
    xx: FloatArray
    c: FloatArray
    cc: FloatArray
    xc: FloatArray
    n0: FloatArray
    x0: FloatArray
    xx0: FloatArray

    def __post_init__(self) -> None:
        shapes = {np.shape(getattr(self, f.name)) for f in fields(self)}
        if len(shapes) != 1:
            raise ValueError(f"CovariateSums: every field must have the same shape, got {sorted(shapes)}")

    @staticmethod
    def of(*arrays: npt.ArrayLike) -> CovariateSums:
        """From the nine arrays in the order of :data:`FIELDS`."""
        if len(arrays) != len(FIELDS):
            raise ValueError(f"CovariateSums.of: expected {len(FIELDS)} arrays ({', '.join(FIELDS)}), "
                             f"got {len(arrays)}")
        return CovariateSums(*(_f(a) for a in arrays))

    @staticmethod
    def of_sessions(x: npt.ArrayLike, c: npt.ArrayLike, stratum: npt.ArrayLike, strata: int) -> CovariateSums:
        """The sums of individual sessions: DCG ``x``, covariate ``c`` (NaN: none) and stratum index in
        [0, ``strata``) (1-D arrays of one length); shape (strata,)."""
        xs, cs, hs = _f(x), _f(c), np.asarray(stratum, dtype=np.int64)
        if not xs.shape == cs.shape == hs.shape or xs.ndim != 1:
            raise ValueError("of_sessions: x, c and stratum must be 1-D arrays of one length")
        if hs.size and (hs.min() < 0 or hs.max() >= strata):
            raise ValueError(f"of_sessions: stratum must be in [0, {strata})")
        has = np.isfinite(cs)
        c0 = np.where(has, cs, 0.0)

        def total(values: FloatArray, mask: npt.NDArray[np.bool_]) -> FloatArray:
            out: FloatArray = np.bincount(hs[mask], weights=values[mask], minlength=strata).astype(np.float64)
            return out

        ones = np.ones(xs.shape)
        return CovariateSums(total(ones, has), total(xs, has), total(xs * xs, has), total(c0, has),
                             total(c0 * c0, has), total(xs * c0, has), total(ones, ~has), total(xs, ~has),
                             total(xs * xs, ~has))

    def stack(self) -> FloatArray:
        """The fields along a new last axis (shape (..., strata, 9), in the order of :data:`FIELDS`)."""
        return np.stack([getattr(self, name) for name in FIELDS], axis=-1)

    def __add__(self, other: CovariateSums) -> CovariateSums:
        return CovariateSums(*(getattr(self, name) + getattr(other, name) for name in FIELDS))


def query_covariate(sessions: npt.ArrayLike, total: npt.ArrayLike, min_sessions: int = 1) -> FloatArray:
    """Per query, the covariate: the mean DCG of its scored sessions before the comparison's period
    (``total`` / ``sessions``), NaN for a query with fewer than ``min_sessions`` of them."""
    if isinstance(min_sessions, bool) or not isinstance(min_sessions, int) or min_sessions < 1:
        raise ValueError(f"min_sessions: expected an integer ≥ 1, got {min_sessions!r}")
    n, s = _f(sessions), _f(total)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(n >= min_sessions, s / np.where(n > 0, n, 1.0), np.nan)
    return out


def pooled_slope(baseline: CovariateSums, candidate: CovariateSums) -> FloatArray:
    """β̂ pooled over both arms (not what the comparison uses: :func:`arm_slopes`): the least-squares slope
    of x on c within every (arm, stratum) of the sessions with a covariate, pooled over both arms and the
    strata they share; 0 where c does not vary. Shape: the leading axes (without the strata)."""
    common = (baseline.n + baseline.n0 > 0) & (candidate.n + candidate.n0 > 0)
    sxc = np.zeros(common.shape[:-1])
    scc = np.zeros(common.shape[:-1])
    for arm in (baseline, candidate):
        safe = np.where(arm.n > 0, arm.n, 1.0)
        sxc = sxc + np.where(common & (arm.n > 0), arm.xc - arm.x * arm.c / safe, 0.0).sum(axis=-1)
        scc = scc + np.where(common & (arm.n > 0), arm.cc - arm.c * arm.c / safe, 0.0).sum(axis=-1)
    # a covariate without variation (up to rounding) explains nothing: no adjustment
    scale = sum(np.where(common, arm.cc, 0.0).sum(axis=-1) for arm in (baseline, candidate))
    varies = scc > 1e-12 * np.maximum(scale, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(varies, sxc / np.where(varies, scc, 1.0), 0.0)
    return out


def arm_slopes(baseline: CovariateSums, candidate: CovariateSums) -> tuple[FloatArray, FloatArray]:
    """(β̂_baseline, β̂_candidate): each arm's least-squares slope of x on c within the strata both arms
    have, pooled over those strata (module docstring); 0 where its covariate does not vary. Shape: the
    leading axes (without the strata)."""
    common = (baseline.n + baseline.n0 > 0) & (candidate.n + candidate.n0 > 0)
    out = []
    for arm in (baseline, candidate):
        safe = np.where(arm.n > 0, arm.n, 1.0)
        inside = common & (arm.n > 0)
        sxc = np.where(inside, arm.xc - arm.x * arm.c / safe, 0.0).sum(axis=-1)
        scc = np.where(inside, arm.cc - arm.c * arm.c / safe, 0.0).sum(axis=-1)
        scale = np.where(inside, arm.cc, 0.0).sum(axis=-1)
        varies = scc > 1e-12 * np.maximum(scale, 1e-300)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.asarray(np.where(varies, sxc / np.where(varies, scc, 1.0), 0.0), dtype=np.float64))
    return out[0], out[1]


def adjusted_mean_paths(baseline: CovariateSums, candidate: CovariateSums,
                        slope: npt.ArrayLike | None = None) -> tuple[LogPath, LogPath]:
    """(baseline's adjusted mean reweighted to the candidate's strata mix, candidate's adjusted mean over
    the common strata), as :class:`~.paths.LogPath` values: n, log of the adjusted mean and its variance
    (module docstring). ``slope``: one β for both arms (a number, or one per leading index); default
    each arm's own (:func:`arm_slopes`). NaN where undefined, as :func:`.matched.matched_mean_paths`."""
    lead = baseline.n.shape[:-1]
    betas = arm_slopes(baseline, candidate) if slope is None else (_f(slope), _f(slope))
    beta_b, beta_c = (np.broadcast_to(b, lead)[..., None] for b in betas)
    nb, nc = baseline.n + baseline.n0, candidate.n + candidate.n0
    s = _Strata(nb, nc)
    with_c = s.keep(baseline.n) + s.keep(candidate.n)
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled_c = s.keep(baseline.c) + s.keep(candidate.c)
        centre = np.where(with_c > 0, pooled_c / np.where(with_c > 0, with_c, 1.0), 0.0)

    def u_sums(arm: CovariateSums, beta: FloatArray) -> tuple[FloatArray, FloatArray]:
        spread_c = arm.c - arm.n * centre
        total = arm.x + arm.x0 - beta * spread_c
        square = (arm.xx + arm.xx0 - 2.0 * beta * (arm.xc - centre * arm.x)
                  + beta * beta * (arm.cc - 2.0 * centre * arm.c + arm.n * centre * centre))
        return s.keep(total), s.keep(square)

    # the arms' sums of u in place of those of x: the rest is the time-matched comparison itself
    return matched_mean_paths(nb, *u_sums(baseline, beta_b), nc, *u_sums(candidate, beta_c))


def adjusted_mean_path(baseline: CovariateSums, candidate: CovariateSums,
                       slope: npt.ArrayLike | None = None) -> EffectPath:
    """The adjusted, time-matched effect θ̂ on mean DCG after every look (arrays of shape (..., looks,
    strata), e.g. cumulative sums), for :func:`~.paths.effect_verdict_path` and
    :func:`~.paths.sticky_path`."""
    return EffectPath.of(*adjusted_mean_paths(baseline, candidate, slope))
