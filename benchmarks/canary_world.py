"""Simulated canaries and deploys in the realistic world, summed as the stream sums them, and judged by the
monitor's own verdict code: what ``benchmarks/canary.py`` measures.

**A run** (one simulated canary or deploy of one bucket's :class:`~monitor.sim.world.World`):

* **history**: a day of the baseline ranker alone before the comparison (``BUDGET`` labelled sessions an
  hour, the hourly mix of the world): each query's mean DCG@k in it is the query's covariate, as the
  stream's ``covariate_window`` gives it (a query without sessions in it has none);
* **canary**: ``looks`` epochs of 15 minutes from its start hour, ``PER_LOOK`` labelled sessions per look,
  each the candidate's with the canary's *actual* share in that look; **deploy**: the previous ranker's
  ``BUDGET`` sessions in each hour of the day before the deploy (the baseline, all there at the first
  look), then the new ranker's ``PER_LOOK`` per look from the deploy on;
* a **candidate session** is drawn from the candidate's query mix (``harder``: a mix tilted so that its
  expected mean DCG@k is that much lower, the ranking as good as the baseline's on every query: the mix
  alone moves the per-session mean), served by the broken ranker with the probability that lowers its
  mean by ``drop`` (:meth:`~monitor.sim.world.World.sample`), and then, with probability ``irrelevant``,
  replaced by a list of as many documents that are all irrelevant (a ranker returning nothing relevant:
  DCG 0, every pair grade-tied: no concordant and no discordant pair);
* **impressions**: every session shown, labelled or not: ``TRAFFIC`` an hour, each the candidate's with the
  actual share (binomial per look), for the sample-ratio check against the *declared* share.

Per arm and look the sums are those the stream keeps (``dcg``, ``pnr`` and ``pairs`` fields of
:func:`monitor.core.canary.matched.fields_of`, the ties-positive convention's P moments, the covariate
sums over the sessions whose query has a covariate, impressions), placed in the comparison's time strata (the
hour since the canary's start; the hour of day for a deploy) and summed over the looks, so the verdicts come
from :mod:`monitor.core.canary.metric_paths`, the code :func:`monitor.core.canary.comparisons` runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from monitor.core.canary import CanaryConfig
from monitor.core.canary.adjusted import adjusted_mean_paths, pooled_slope
from monitor.core.canary.checks import log_ratio_bf
from monitor.core.canary.covariates import covariate_sums
from monitor.core.canary.matched import matched_mean_paths, matched_paths
from monitor.core.canary.metric_paths import DcgPaths, PnrPaths, dcg_paths, decide, pnr_paths
from monitor.core.canary.verdict_paths import EffectPath, VerdictPath
from monitor.core.stream.config import StreamConfig
from monitor.sim.world import HOURS, World

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

STREAM = StreamConfig()
BUDGET = round(STREAM.budget["tail"])  # labelled sessions per bucket and hour
LOOKS_PER_HOUR = round(STREAM.budget_period / STREAM.epoch)
PER_LOOK = BUDGET // LOOKS_PER_HOUR
TRAFFIC = {"head": 162_000, "tail": 7_000}  # impressions per hour (benchmarks/judgments.py says why)
CONFIG = CanaryConfig()
# per-session fields summed per look: dcg (3), pnr (6), pairs (3), seed P (3: ΣP, ΣP², ΣPD), covariate (6)
DCG, PNR, PAIRS, SEED, COV = slice(0, 3), slice(3, 9), slice(9, 12), slice(12, 15), slice(15, 21)
FIELDS = 21


@dataclass(frozen=True)
class Scenario:
    """What the candidate does. ``share``: the declared share per look (None: a deploy); ``actual``: the
    share it really gets (a sample-ratio mismatch when it differs); ``drop``, ``irrelevant``, ``harder``:
    module docstring."""

    kind: str  # "canary" or "deploy"
    hours: int
    share: FloatArray | None = None
    actual: FloatArray | None = None
    drop: float = 0.0
    irrelevant: float = 0.0
    harder: float = 0.0
    deploy_hour: int = 10


@dataclass(frozen=True)
class Runs:
    """Sums of ``runs`` simulated comparisons: per arm (0 baseline, 1 candidate), cumulative per look and
    stratum (shape (2, runs, looks, strata, FIELDS)); impressions per arm and look (not cumulative);
    the stratum of each look."""

    sums: FloatArray
    impressions: FloatArray
    strata: IntArray


def _session_fields(x: FloatArray, con: FloatArray, neg: FloatArray, pos: FloatArray, c: FloatArray,
                    mask: npt.NDArray[np.bool_]) -> FloatArray:
    """Per session the FIELDS values (0 where ``mask`` is false), summed over the last axis."""
    m = mask.astype(np.float64)
    has = np.isfinite(c) & mask
    c0 = np.where(has, c, 0.0)
    xw = np.where(has, x, 0.0)
    g = con + neg
    parts = [m, x * m, x * x * m,
             m, con * m, neg * m, con * con * m, neg * neg * m, con * neg * m,
             m, g * m, g * g * m,
             pos * m, pos * pos * m, pos * neg * m,
             has.astype(np.float64), xw, xw * xw, c0, c0 * c0, xw * c0]
    return np.stack([p.sum(axis=-1) for p in parts], axis=-1)


def _covariates(world: World, rng: np.random.Generator, runs: int, start_hours: IntArray) -> FloatArray:
    """Per run and query, the mean DCG@k of the history day before each run's start (NaN: no session)."""
    queries = world.settings.queries
    hours = (start_hours[:, None, None] - HOURS + np.arange(HOURS)[None, :, None]) % HOURS
    hours = np.broadcast_to(hours, (runs, HOURS, BUDGET))
    flat, query = world.sample(rng, hours, np.zeros(hours.shape, dtype=bool))
    key = (np.arange(runs)[:, None, None] * queries + query).ravel()
    n = np.bincount(key, minlength=runs * queries)
    total = np.bincount(key, weights=world.outcomes.dcg.ravel()[flat].ravel(), minlength=runs * queries)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.where(n > 0, total / np.maximum(n, 1), np.nan).reshape(runs, queries)
    return out


def _draw(world: World, harder: World | None, rng: np.random.Generator, hours: IntArray,
          candidate: npt.NDArray[np.bool_], scenario: Scenario, covariate: FloatArray
          ) -> tuple[FloatArray, ...]:
    """Sessions of shape ``hours.shape`` (runs first): DCG, C, N, P and the covariate of each."""
    flat, query = world.sample(rng, hours, candidate, scenario.drop)
    if harder is not None and candidate.any():  # the candidate's sessions from the harder mix
        moved_flat, moved_query = harder.sample(rng, hours, candidate, scenario.drop)
        flat, query = np.where(candidate, moved_flat, flat), np.where(candidate, moved_query, query)
    o = world.outcomes
    x, con, neg, pos = (a.ravel()[flat] for a in (o.dcg, o.con, o.neg, o.pos))
    if scenario.irrelevant > 0:
        gone = candidate & (rng.random(hours.shape) < scenario.irrelevant)
        pairs = con + neg + (pos - con)  # all pairs of the list: every one grade-tied now
        x, con, neg, pos = (np.where(gone, 0.0, x), np.where(gone, 0.0, con), np.where(gone, 0.0, neg),
                            np.where(gone, pairs, pos))
    rows = np.arange(hours.shape[0]).reshape((-1,) + (1,) * (hours.ndim - 1))
    c = covariate[rows, query]
    return x, con, neg, pos, c


def simulate(world: World, scenario: Scenario, runs: int, seed: int, harder: World | None = None,
             start_hours: IntArray | None = None) -> Runs:
    """``runs`` comparisons of ``scenario`` (module docstring)."""
    rng = np.random.default_rng(seed)
    looks = scenario.hours * LOOKS_PER_HOUR
    if scenario.kind == "canary":
        start = rng.integers(0, HOURS, runs) if start_hours is None else start_hours
        covariate = _covariates(world, np.random.default_rng([seed, 1]), runs, start)
        strata = np.arange(looks) // LOOKS_PER_HOUR
        count = scenario.hours
    else:
        start = np.full(runs, scenario.deploy_hour, dtype=np.int64)
        covariate = _covariates(world, np.random.default_rng([seed, 1]), runs, (start - HOURS) % HOURS)
        strata = (scenario.deploy_hour + np.arange(looks) // LOOKS_PER_HOUR) % HOURS
        count = HOURS
    sums = np.zeros((2, runs, looks, count, FIELDS))
    impressions = np.zeros((2, runs, looks))
    if scenario.kind == "deploy":  # the previous ranker's day before the deploy: all at the first look
        day = np.arange(HOURS)
        hours = np.broadcast_to(((scenario.deploy_hour - HOURS + day) % HOURS)[None, :, None],
                                (runs, HOURS, BUDGET))
        x, con, neg, pos, c = _draw(world, None, rng, hours, np.zeros(hours.shape, dtype=bool), scenario,
                                    covariate)
        per_hour = _session_fields(x, con, neg, pos, c, np.ones(hours.shape, dtype=bool))
        first_look = sums[0][:, 0]  # a view: (runs, strata, FIELDS)
        first_look[:, (scenario.deploy_hour - HOURS + day) % HOURS] = per_hour
    actual = scenario.actual if scenario.actual is not None else scenario.share
    step = max(1, 400_000 // (runs * PER_LOOK))
    for a in range(0, looks, step):
        b = min(looks, a + step)
        index = np.arange(a, b)
        hour = ((start[:, None] + index // LOOKS_PER_HOUR) % HOURS)
        hours = np.broadcast_to(hour[:, :, None], (runs, b - a, PER_LOOK))
        if scenario.kind == "canary":
            assert actual is not None
            candidate = rng.random(hours.shape) < actual[index][None, :, None]
        else:
            candidate = np.ones(hours.shape, dtype=bool)
        x, con, neg, pos, c = _draw(world, harder, rng, hours, candidate, scenario, covariate)
        for arm, mask in ((0, ~candidate), (1, candidate)):
            fields = _session_fields(x, con, neg, pos, c, mask)
            sums[arm, :, index, strata[index]] += np.swapaxes(fields, 0, 1)
        if scenario.kind == "canary":
            assert actual is not None
            traffic = TRAFFIC[world.bucket] // LOOKS_PER_HOUR
            cand = rng.binomial(traffic, actual[index], (runs, b - a)).astype(np.float64)
            impressions[1, :, a:b], impressions[0, :, a:b] = cand, traffic - cand
    np.cumsum(sums, axis=2, out=sums)
    return Runs(sums, impressions, strata)


# -- the verdicts -----------------------------------------------------------------------------------------
def bound(world: World, config: CanaryConfig = CONFIG) -> tuple[float, float]:
    return config.dcg_bound[world.bucket], config.pairs_bound[world.bucket]


def default_dcg(runs: Runs, world: World, config: CanaryConfig = CONFIG, adjusted: bool = True) -> DcgPaths:
    """The DCG verdict users get (adjusted, balance-checked, bounded), or with the adjustment off."""
    s = runs.sums
    if not adjusted:
        return dcg_paths(s[0][..., DCG], s[1][..., DCG], config, bound(world, config)[0])
    return dcg_paths(s[0][..., DCG], s[1][..., DCG], config, bound(world, config)[0], s[0][..., COV],
                     s[1][..., COV])


BEFORE = replace(CONFIG, wide_weight=0.0)  # one normal mixture, as before issue 26


def pooled_dcg(runs: Runs, config: CanaryConfig = BEFORE) -> VerdictPath:
    """The verdict before issue 26: adjusted with one slope pooled over both arms, one normal mixture, no
    exact bounds, no balance check (its sequence at α · 0.99 where it was at α: a negligible difference)."""
    s = runs.sums
    sums_b = covariate_sums(s[0][..., DCG], s[0][..., COV])
    sums_c = covariate_sums(s[1][..., DCG], s[1][..., COV])
    base, cand = adjusted_mean_paths(sums_b, sums_c, pooled_slope(sums_b, sums_c))
    return decide(EffectPath.of(base, cand), config)


def unchecked_dcg(runs: Runs, world: World, config: CanaryConfig = CONFIG) -> VerdictPath:
    """Adjusted with each arm's slope and bounded, but without the balance check (what the adjustment
    alone says when the arms' mixes differ)."""
    s = runs.sums
    sums_b = covariate_sums(s[0][..., DCG], s[0][..., COV])
    sums_c = covariate_sums(s[1][..., DCG], s[1][..., COV])
    base, cand = adjusted_mean_paths(sums_b, sums_c)
    return decide(EffectPath.of(base, cand), config)


def default_pnr(runs: Runs, world: World, config: CanaryConfig = CONFIG) -> PnrPaths:
    s = runs.sums
    return pnr_paths(s[0][..., PNR], s[1][..., PNR], s[0][..., PAIRS], s[1][..., PAIRS], config,
                     bound(world, config)[1])


def seed_pnr(runs: Runs, config: CanaryConfig = BEFORE) -> VerdictPath:
    """PNR with grade-tied pairs counted as positive (the ties-positive convention), as the verdict was
    before."""
    s = runs.sums

    def arm(a: int) -> FloatArray:
        x = s[a]
        return np.stack([x[..., 3], x[..., 12], x[..., 5], x[..., 13], x[..., 7], x[..., 14]], axis=-1)

    base, cand = matched_paths(arm(0), arm(1), "pnr")
    return decide(EffectPath.of(base, cand), config)


def plain_dcg_means(runs: Runs) -> tuple[FloatArray, FloatArray]:
    s = runs.sums
    b, c = matched_mean_paths(*(s[0][..., i] for i in range(3)), *(s[1][..., i] for i in range(3)))
    return np.exp(b.value), np.exp(c.value)


def sample_ratio_flags(runs: Runs, share: FloatArray, config: CanaryConfig = CONFIG) -> npt.NDArray[np.bool_]:
    """Per run and look: the sample-ratio mismatch declared by then (:mod:`monitor.core.canary.checks`),
    the declared share per look in hourly segments (a new share declared at each hour where it changes),
    the first look of each segment left out."""
    looks = runs.impressions.shape[-1]
    changes = [0] + [i for i in range(1, looks) if share[i] != share[i - 1]]
    log_bf = np.zeros(runs.impressions.shape[1:])
    for k, begin in enumerate(changes):
        end = changes[k + 1] if k + 1 < len(changes) else looks
        inside = np.zeros(looks, dtype=bool)
        inside[begin + 1:end] = True  # the epoch holding the change is left out
        x = np.cumsum(np.where(inside, runs.impressions[1], 0.0), axis=-1)
        y = np.cumsum(np.where(inside, runs.impressions[0], 0.0), axis=-1)
        log_bf = log_bf + log_ratio_bf(x, y, float(share[begin]), config.mixture_sd)
    flagged = log_bf >= math.log(1.0 / config.check_alpha)
    out: npt.NDArray[np.bool_] = np.logical_or.accumulate(flagged, axis=-1)
    return out


__all__ = ["BUDGET", "CONFIG", "LOOKS_PER_HOUR", "PER_LOOK", "Runs", "Scenario", "default_dcg",
           "default_pnr", "pooled_dcg", "sample_ratio_flags", "seed_pnr", "simulate", "unchecked_dcg"]
