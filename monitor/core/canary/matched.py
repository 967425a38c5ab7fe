"""Time-matched arms: the baseline reweighted to the candidate's mix over time strata (post-stratification).

When the query mix follows the clock, a candidate that served only at night and a baseline that served a
whole day differ before either ranker does anything (Simpson's paradox). So both arms are split into
strata h (hour of day for a deploy, hour of the canary for a canary: :mod:`.pairing`), and the
baseline's per-stratum means are averaged with the *candidate's* weights w_h = n_c,h / n_c over the
strata S that both arms have:

    m_c  = Σ_S x_c,h / n_c                        (the candidate's plain mean over S)
    m_b* = Σ_S w_h · m_b,h,   m_b,h = x_b,h / n_b,h

so each candidate hour is compared with the same hours of the baseline. With one stratum this is the
plain comparison of :mod:`.estimates`. Variances are those of post-stratified means, conditional on the
stratum counts (Cochran 1977, *Sampling Techniques*, §5.3 and §5A.9), with each stratum's own sample
variance s_h² (the arm's pooled within-stratum variance Σ_h (Σx²_h − x_h² / n_h) / (n − |S|) for a
stratum of one session, which has none):

    Var(m_c) = Σ_S w_h² s_c,h² / n_c,h,    Var(m_b*) = Σ_S w_h² s_b,h² / n_b,h

and on the log scale Var(log m) = Var(m) / m². (A variance pooled over strata would understate it when
the candidate's weight sits on the noisier strata, as at night.) PNR (ΣP / ΣN) is the same with both
means reweighted, P̄* = Σ w_h P̄_b,h and N̄* = Σ w_h N̄_b,h, and the delta method of :mod:`.estimates`
on each stratum's (co)variances:

    Var(log P̄* − log N̄*) = Σ_S (w_h² / n_b,h) · (S_PP,h / P̄*² + S_NN,h / N̄*² − 2 S_PN,h / (P̄* N̄*))

Candidate sessions in strata the baseline never had are left out of both arms (``n_candidate`` counts the
matched ones).

Inputs are arrays whose last axis is the strata (any leading axes: looks, simulated runs); the results
are :class:`~.paths.LogPath` values for :func:`~.paths.verdict_path`, NaN where undefined.

>>> import numpy as np
>>> # strata (day, night): the baseline's mean DCG is 2 by day and 1 at night; the candidate served at night
>>> base, cand = matched_mean_paths(np.array([100.0, 100.0]), np.array([200.0, 100.0]),
...                                 np.array([500.0, 200.0]), np.array([0.0, 50.0]),
...                                 np.array([0.0, 50.0]), np.array([0.0, 100.0]))
>>> float(np.exp(cand.value - base.value))  # night against night: no change (a pooled baseline: -33%)
1.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from monitor.core.canary.verdict_paths import ZERO_MEAN, EffectPath, FloatArray, LogPath

DCG_FIELDS = ("sessions", "dcg", "dcg_sq")
PNR_FIELDS = ("sessions", "concordant", "discordant", "pnr_con_sq", "pnr_neg_sq", "pnr_con_neg")
WIDTHS = {"dcg": 3, "pnr": 6, "pairs": 3}
SECOND_MOMENTS = frozenset({"dcg_sq", "pnr_con_sq", "pnr_neg_sq", "pnr_con_neg"})


def fields_of(stats: Mapping[str, float], metric: str) -> tuple[float, ...]:
    """The sums the metric's test needs: ``dcg`` in the order of ``DCG_FIELDS``; ``pnr`` in the order of
    ``PNR_FIELDS``: the verdict's PNR leaves grade-tied pairs out (concordant / discordant, the skip
    convention: a list of one grade, all irrelevant say, adds nothing to it, where the ties-positive
    convention would count its tied pairs as positive); ``pairs``: the pairs of different grades a session has
    (concordant + discordant: what PNR judges), n, Σ, Σ². A second moment missing from stats with
    sessions (sums written before it existed) is NaN: no variance, rather than a wrong one."""
    def get(name: str) -> float:
        value = stats.get(name)
        if value is not None:
            return value
        return math.nan if name in SECOND_MOMENTS and stats.get("sessions", 0.0) != 0 else 0.0

    if metric == "dcg":
        return tuple(get(name) for name in DCG_FIELDS)
    if metric == "pnr":
        return tuple(get(name) for name in PNR_FIELDS)
    if metric == "pairs":
        c, d = get("concordant"), get("discordant")
        return (get("sessions"), c + d, get("pnr_con_sq") + 2.0 * get("pnr_con_neg") + get("pnr_neg_sq"))
    raise ValueError(f"metric: {metric!r} is not one of dcg, pnr, pairs")


def _f(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


class _Strata:
    """Both arms restricted to the common strata, and the candidate's weights."""

    def __init__(self, nb: FloatArray, nc: FloatArray) -> None:
        self.common = (nb > 0) & (nc > 0)
        self.nb = np.where(self.common, nb, 0.0)
        self.nc = np.where(self.common, nc, 0.0)
        self.count = self.common.sum(axis=-1).astype(np.float64)
        self.total_b = self.nb.sum(axis=-1)
        self.total_c = self.nc.sum(axis=-1)
        self.safe_nb = np.where(self.nb > 0, self.nb, 1.0)
        self.safe_nc = np.where(self.nc > 0, self.nc, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.weights = self.nc / np.where(self.total_c > 0, self.total_c, 1.0)[..., None]

    def keep(self, x: FloatArray) -> FloatArray:
        return np.where(self.common, x, 0.0)

    def spread(self, xy: FloatArray, x: FloatArray, y: FloatArray, n: FloatArray, total: FloatArray
               ) -> FloatArray:
        """Σ_S w_h² cov_h(x, y) / n_h: each stratum's sample (co)variance, the pooled within-stratum one
        Σ_h (Σxy_h − x_h y_h / n_h) / (total − |S|) for a stratum of one session."""
        safe = np.where(n > 0, n, 1.0)
        centred = self.keep(xy - x * y / safe)
        with np.errstate(divide="ignore", invalid="ignore"):
            pooled = centred.sum(axis=-1) / (total - self.count)
            own = centred / np.where(n > 1, n - 1.0, 1.0)
            cov = np.where(n > 1, own, pooled[..., None])
            return np.asarray(self.keep(self.weights * self.weights * cov / safe).sum(axis=-1),
                              dtype=np.float64)


def _log(x: FloatArray, ok: npt.NDArray[np.bool_]) -> FloatArray:
    return np.where(ok, np.log(np.where(ok, x, 1.0)), np.nan)


def matched_mean_paths(nb: npt.ArrayLike, sb: npt.ArrayLike, qb: npt.ArrayLike, nc: npt.ArrayLike,
                       sc: npt.ArrayLike, qc: npt.ArrayLike) -> tuple[LogPath, LogPath]:
    """(baseline reweighted to the candidate's strata mix, candidate over the common strata) for mean
    DCG: per stratum count, Σx and Σx² of each arm (module docstring)."""
    nb, sb, qb, nc, sc, qc = (_f(a) for a in (nb, sb, qb, nc, sc, qc))
    s = _Strata(nb, nc)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_b = (s.weights * s.keep(sb) / s.safe_nb).sum(axis=-1)
        mean_c = s.keep(sc).sum(axis=-1) / s.total_c
        var_b = np.maximum(s.spread(qb, sb, sb, s.nb, s.total_b), 0.0) / (mean_b * mean_b)
        var_c = np.maximum(s.spread(qc, sc, sc, s.nc, s.total_c), 0.0) / (mean_c * mean_c)
    ok_b, ok_c = (s.total_b > 0) & (mean_b > ZERO_MEAN), (s.total_c > 0) & (mean_c > ZERO_MEAN)
    base = LogPath(s.total_b, _log(mean_b, ok_b), np.where(ok_b & (s.total_b - s.count >= 1), var_b, np.nan),
                   (s.total_b > 0) & ~ok_b)
    cand = LogPath(s.total_c, _log(mean_c, ok_c), np.where(ok_c & (s.total_c - s.count >= 1), var_c, np.nan),
                   (s.total_c > 0) & ~ok_c)
    return base, cand


def matched_mean_path(n_b: npt.ArrayLike, s_b: npt.ArrayLike, q_b: npt.ArrayLike, n_c: npt.ArrayLike,
                      s_c: npt.ArrayLike, q_c: npt.ArrayLike) -> EffectPath:
    """The time-matched effect on mean DCG after every look, from per-stratum cumulative count, Σx and Σx²
    of each arm, arrays of shape (..., looks, strata) (:func:`matched_mean_paths`)."""
    return EffectPath.of(*matched_mean_paths(n_b, s_b, q_b, n_c, s_c, q_c))


def _log_ratio(p: FloatArray, q: FloatArray, spp: FloatArray, snn: FloatArray, spn: FloatArray,
               n: FloatArray, enough: npt.NDArray[np.bool_]) -> LogPath:
    """log(p / q) and its delta-method variance from the weighted (co)variances of the two means."""
    ok = (n > 0) & (p > ZERO_MEAN) & (q > ZERO_MEAN)
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = spp / (p * p) + snn / (q * q) - 2.0 * spn / (p * q)
    value = np.where(ok, np.log(np.where(ok, p, 1.0)) - np.log(np.where(ok, q, 1.0)), np.nan)
    return LogPath(n, value, np.where(ok & enough, np.maximum(variance, 0.0), np.nan))


def matched_pnr_paths(nb: npt.ArrayLike, pb: npt.ArrayLike, negb: npt.ArrayLike, ppb: npt.ArrayLike,
                      nnb: npt.ArrayLike, pnb: npt.ArrayLike, nc: npt.ArrayLike, pc: npt.ArrayLike,
                      negc: npt.ArrayLike, ppc: npt.ArrayLike, nnc: npt.ArrayLike, pnc: npt.ArrayLike
                      ) -> tuple[LogPath, LogPath]:
    """The same for PNR = ΣP / ΣN: per stratum count, ΣP, ΣN, ΣP², ΣN², ΣPN of each arm."""
    nb, pb, negb, ppb, nnb, pnb = (_f(a) for a in (nb, pb, negb, ppb, nnb, pnb))
    nc, pc, negc, ppc, nnc, pnc = (_f(a) for a in (nc, pc, negc, ppc, nnc, pnc))
    s = _Strata(nb, nc)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_b = (s.weights * s.keep(pb) / s.safe_nb).sum(axis=-1)
        q_b = (s.weights * s.keep(negb) / s.safe_nb).sum(axis=-1)
        p_c = s.keep(pc).sum(axis=-1) / s.total_c
        q_c = s.keep(negc).sum(axis=-1) / s.total_c
        moments_b = (np.maximum(s.spread(ppb, pb, pb, s.nb, s.total_b), 0.0),
                     np.maximum(s.spread(nnb, negb, negb, s.nb, s.total_b), 0.0),
                     s.spread(pnb, pb, negb, s.nb, s.total_b))
        moments_c = (np.maximum(s.spread(ppc, pc, pc, s.nc, s.total_c), 0.0),
                     np.maximum(s.spread(nnc, negc, negc, s.nc, s.total_c), 0.0),
                     s.spread(pnc, pc, negc, s.nc, s.total_c))
    base = _log_ratio(p_b, q_b, *moments_b, s.total_b, s.total_b - s.count >= 1)
    cand = _log_ratio(p_c, q_c, *moments_c, s.total_c, s.total_c - s.count >= 1)
    return base, cand


def matched_paths(baseline: npt.ArrayLike, candidate: npt.ArrayLike, metric: str) -> tuple[LogPath, LogPath]:
    """:func:`matched_mean_paths` (``dcg``, ``pairs``) or :func:`matched_pnr_paths` (``pnr``) from arrays
    of shape (..., strata, fields), the fields in the order of :func:`fields_of`."""
    b, c = _f(baseline), _f(candidate)
    if metric in ("dcg", "pairs"):
        return matched_mean_paths(*(b[..., i] for i in range(3)), *(c[..., i] for i in range(3)))
    if metric == "pnr":
        return matched_pnr_paths(*(b[..., i] for i in range(6)), *(c[..., i] for i in range(6)))
    raise ValueError(f"metric: {metric!r} is not one of dcg, pnr, pairs")


def pnr_components(baseline: npt.ArrayLike, candidate: npt.ArrayLike) -> tuple[tuple[LogPath, LogPath],
                                                                               tuple[LogPath, LogPath]]:
    """The components of the PNR comparison, each time-matched like a mean: ((baseline's concordant pairs
    per session, candidate's), (baseline's discordant pairs per session, candidate's)), from the arrays
    of :func:`matched_paths` for ``pnr``."""
    b, c = _f(baseline), _f(candidate)
    concordant = matched_mean_paths(*(b[..., i] for i in (0, 1, 3)), *(c[..., i] for i in (0, 1, 3)))
    discordant = matched_mean_paths(*(b[..., i] for i in (0, 2, 4)), *(c[..., i] for i in (0, 2, 4)))
    return concordant, discordant
