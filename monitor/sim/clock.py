"""A query mix that follows the clock: more hard queries at night (``SimConfig.night_dip``).

Real search traffic changes with the hour: at night fewer people search, and more of what they search is
hard (long, rare, oddly phrased), so a ranker's mean DCG dips at night without the ranker doing anything
different. Here the traffic keeps its volume and its bucket shares; within each bucket the query
distribution is tilted towards the bucket's hard queries by a weight that follows a cosine of event time:

    p_q(t) ∝ p_q · exp(−β_b(t) · z_q)

where ``p_q`` is the query's usual traffic share (:mod:`monitor.sim.queries`), ``z_q`` its quality
standardised within its bucket (``(e_q − m_b) / s_b``, with ``e_q`` the query's expected DCG@k under a
healthy ranker and ``m_b``, ``s_b`` the traffic-weighted mean and standard deviation of ``e_q``), and
``β_b(t)`` solved, per bucket, so that the bucket's expected mean DCG@k is exactly

    m_b(t) = m_b · (1 − night_dip · cos(2π (t − dip_hour) / 24 h))

``night_dip`` lower than the daily mean ``m_b`` at ``dip_hour`` (03:00 UTC by default), as much higher
twelve hours later, and ``m_b`` over a whole day (β > 0 at night: hard queries more often; β < 0 by day:
easy ones). ``e_q`` is estimated by ranking the query's pool :data:`DRAWS` times with the healthy ranker's
model and noise (a random stream of its own), DCG@k with k = ``label_k`` from the latent grades (the
monitor's DCG@k when every shown document is labelled). β is solved on a grid of :data:`BINS` phases of
the day (5 minutes); a session uses the tilt of its phase.

The same uniform draws pick the query as without the dip (one per session, from the traffic stream), so
``night_dip`` changes which queries are searched and nothing else about the traffic.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from monitor.sim.config import BUCKETS, DAY_S, SimConfig
from monitor.sim.queries import Vocabulary
from monitor.sim.relevance import LEVEL_GAINS, Pools

BINS = 288  # phases of the day: 5-minute steps
DRAWS = 32  # rankings per query to estimate its expected DCG@k

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_GAINS = np.asarray(LEVEL_GAINS, dtype=np.float64)
_DISCOUNTS = 1.0 / np.log2(np.arange(2, 202, dtype=np.float64))  # positions 1..200 (the event limit)


def expected_dcg(config: SimConfig, vocabulary: Vocabulary, pools: Pools, rng: np.random.Generator,
                 draws: int = DRAWS) -> FloatArray:
    """Per query number: its mean DCG@``label_k`` over ``draws`` rankings by the healthy model
    (:class:`~monitor.sim.rankers.Ranker`, vectorised: same scores, rounding and stable order)."""
    out = np.zeros(len(vocabulary.texts))
    weight, noise = config.score_weight, config.session_noise
    for bucket in BUCKETS:
        numbers = np.asarray(vocabulary.of_bucket(bucket), dtype=np.int64)
        if numbers.size == 0:
            continue
        levels = np.stack([pools.levels[q] for q in numbers.tolist()])  # (queries, pool)
        effects = np.stack([pools.doc_effects[q] for q in numbers.tolist()])
        top, k = config.top_n(bucket), config.label_k(bucket)
        depth = min(top, k)
        total = np.zeros(numbers.size)
        for _ in range(draws):
            z = weight * levels + effects + rng.normal(0.0, noise, levels.shape)
            scores = np.round(1.0 / (1.0 + np.exp(-(z - 1.5 * weight))), 4)
            order = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
            shown = np.take_along_axis(levels, order, axis=1)
            total += _GAINS[shown] @ _DISCOUNTS[:depth]
        out[numbers] = total / draws
    return out


class _Tilt:
    """One bucket's queries: their base shares (summing to 1) and standardised qualities."""

    def __init__(self, shares: FloatArray, quality: FloatArray) -> None:
        self.log_shares = np.log(shares)
        self.quality = quality
        self.mean = float(shares @ quality)
        spread = math.sqrt(max(float(shares @ (quality - self.mean) ** 2), 0.0))
        self.z = (quality - self.mean) / spread if spread > 0 else np.zeros_like(quality)

    def shares(self, beta: float) -> FloatArray:
        logits = self.log_shares - beta * self.z
        weights = np.exp(logits - logits.max())
        out: FloatArray = weights / weights.sum()
        return out

    def mean_at(self, beta: float) -> float:
        return float(self.shares(beta) @ self.quality)

    def _mean_and_slope(self, beta: float) -> tuple[float, float]:
        """The tilted mean and its derivative in β (−Cov_β(quality, z))."""
        shares = self.shares(beta)
        mean = float(shares @ self.quality)
        return mean, -(float(shares @ (self.quality * self.z)) - mean * float(shares @ self.z))

    def solve(self, target: float) -> float | None:
        """The β giving mean ``target`` (the mean falls as β grows), or None if no β reaches it: a bracket,
        then Newton steps, bisecting whenever a step would leave the bracket."""
        if target == self.mean:
            return 0.0
        sign = 1.0 if target < self.mean else -1.0
        lo, hi = 0.0, sign
        while (self.mean_at(hi) - target) * sign > 0:  # not yet past the target
            lo, hi = hi, 2 * hi
            if abs(hi) > 1e4:
                return None
        beta = (lo + hi) / 2
        for _ in range(100):
            mean, slope = self._mean_and_slope(beta)
            gap = mean - target
            if abs(gap) <= 1e-13 * max(abs(target), 1.0):
                break
            if gap * sign > 0:
                lo = beta
            else:
                hi = beta
            step = beta - gap / slope if slope != 0 else math.nan
            beta = step if min(lo, hi) < step < max(lo, hi) else (lo + hi) / 2
        return beta


class DailyMix:
    """The time-of-day query distribution of a run (module docstring)."""

    def __init__(self, config: SimConfig, vocabulary: Vocabulary, pools: Pools, rng: np.random.Generator
                 ) -> None:
        self.config, self.vocabulary = config, vocabulary
        self.quality = expected_dcg(config, vocabulary, pools, rng)
        self.numbers = {b: np.asarray(vocabulary.of_bucket(b), dtype=np.int64) for b in BUCKETS}
        self.tilts: dict[str, _Tilt] = {}
        for bucket, numbers in self.numbers.items():
            base = vocabulary.probabilities[numbers]
            if numbers.size == 0 or base.sum() <= 0:
                continue
            tilt = _Tilt(base / base.sum(), self.quality[numbers])
            for c in (1.0, -1.0):
                if tilt.solve(self.target(bucket, c, tilt)) is None:
                    raise ValueError(
                        f"night_dip: {config.night_dip:g} is more than the {bucket} queries' mix can give "
                        f"(their expected DCG@k ranges {tilt.quality.min():.3f} … {tilt.quality.max():.3f} "
                        f"around a mean of {tilt.mean:.3f})")
            self.tilts[bucket] = tilt
        self._cdfs: dict[int, FloatArray] = {}

    def daily_mean(self, bucket: str) -> float:
        """The bucket's expected mean DCG@k over a whole day (the untilted mix's)."""
        return self.tilts[bucket].mean

    def target(self, bucket: str, cosine: float, tilt: _Tilt | None = None) -> float:
        mean = (tilt or self.tilts[bucket]).mean
        return mean * (1.0 - self.config.night_dip * cosine)

    def phase(self, ts: npt.ArrayLike) -> FloatArray:
        """Fraction of the day since ``dip_hour`` (0: the deepest point), in [0, 1)."""
        since = np.asarray(ts, dtype=np.float64) - self.config.dip_hour * 3600.0
        out: FloatArray = np.mod(since, DAY_S) / DAY_S
        return out

    def expected_mean(self, bucket: str, ts: float) -> float:
        """The bucket's expected mean DCG@k at ``ts`` (the exact cosine, not the 5-minute grid)."""
        return self.target(bucket, math.cos(2 * math.pi * float(self.phase(ts))))

    def probabilities(self, phase_bin: int) -> FloatArray:
        """Every query's traffic share during one 5-minute phase of the day (bucket shares kept)."""
        cosine = math.cos(2 * math.pi * (phase_bin + 0.5) / BINS)
        out = np.zeros(len(self.vocabulary.texts))
        for bucket, tilt in self.tilts.items():
            numbers = self.numbers[bucket]
            beta = tilt.solve(self.target(bucket, cosine))
            assert beta is not None  # the extremes were checked at construction
            out[numbers] = self.vocabulary.probabilities[numbers].sum() * tilt.shares(beta)
        return out

    def _cdf(self, phase_bin: int) -> FloatArray:
        cdf = self._cdfs.get(phase_bin)
        if cdf is None:
            cdf = np.cumsum(self.probabilities(phase_bin))
            cdf /= cdf[-1]
            self._cdfs[phase_bin] = cdf
        return cdf

    def sample(self, rng: np.random.Generator, times: npt.ArrayLike) -> IntArray:
        """One query number per session time, each from its phase's distribution (one uniform draw per
        session, as :meth:`~monitor.sim.queries.Vocabulary.sample`)."""
        ts = np.asarray(times, dtype=np.float64)
        u = rng.random(ts.size)
        bins = np.minimum((self.phase(ts) * BINS).astype(np.int64), BINS - 1)
        drawn = np.empty(ts.size, dtype=np.int64)
        for phase_bin in np.unique(bins).tolist():
            at = bins == phase_bin
            drawn[at] = np.searchsorted(self._cdf(phase_bin), u[at], side="right")
        out: IntArray = np.minimum(drawn, len(self.vocabulary.texts) - 1)
        return out
