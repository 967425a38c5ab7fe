"""The canary test's settings: one frozen value, validated at construction.

* ``alpha`` (0.05): the confidence sequence covers the true relative change at *every* session with
  probability ≥ 1 − alpha, so looking after each session is allowed; a pair's false regression (on either
  of its two metrics) stays below alpha too, each metric's regression being decided at alpha / 2 (below);
* ``min_relative_drop`` (0.02): the smallest relative drop worth a "regression"; "pass" means the
  sequence rules out a drop this large (``docs/canary.md`` says why 2%);
* ``min_sessions`` (200 per arm): below this either arm is too small for the normal approximation of
  zero-inflated DCG, and the verdict is "inconclusive" whatever the numbers say;
* ``mixture_sd`` (0.05): τ, the standard deviation of the normal mixture over the log ratio (the mSPRT
  "prior"). The sequence is tightest when its half-width is ≈ 1.07 τ, i.e. around drops of 5%;
* ``wide_sd`` (1.0), ``wide_weight`` (0.05): a second, wide component of the mixture, τ = 1 on the log
  scale with 5% of the weight: a ranker broken in most sessions (θ of −2 to −5) is then caught in
  hundreds of sessions instead of thousands, for less than 1% more half-width on the 2–10% drops the
  first component is tuned for (:func:`.sequential.half_widths`; 0 weight: the single mixture);
* ``baseline_window`` (1 day): after a deploy without a canary, the new ranker is compared with the
  previous one's sessions in this much event time before the deploy (a full daily cycle);
* ``time_matched`` (True), ``match_slot`` (1 hour), ``match_period`` (1 day): compare the arms within the
  same time strata (:mod:`.matched`): a deploy's baseline is reweighted to the candidate's mix of
  ``match_slot``-long phases of ``match_period`` (hours of the day; a period of 7 days matches hours of
  the week), a canary's control to the canary's mix of ``match_slot``-long stretches of its period;
* ``adjust_queries`` (True), ``covariate_window`` (1 day), ``covariate_min_sessions`` (1): adjust the DCG
  comparison for query difficulty (:mod:`.adjusted`, CUPED per time stratum): a session's covariate is
  its query's mean DCG@k over the scored sessions of the ``covariate_window`` before the comparison's
  period (a query with fewer than ``covariate_min_sessions`` of them has none, and its sessions count
  unadjusted). Needs ``StreamConfig.query_history``; without it the comparison is the unadjusted one;
* ``sticky`` (True): the verdict is decided on the running intersection of the confidence sequence over
  the looks, one per epoch of the period (:func:`.verdict_paths.sticky_path`), so it does not flap: a
  pass is never lost except to a regression, and a regression is final;
* ``settle`` (4,500 s: the stream's default join window, 1 h, and its quiet-partition margin, 15 min): a
  look reads an epoch only once it has ended and none of its sampled sessions is still open (waiting for
  grades; ``History.settled``), or at the latest ``settle`` seconds after its end, the longest a session
  can stay open (:meth:`with_stream` sets it from the stream's settings). Reading an epoch while some of
  its sessions wait for grades would compare the ones graded first, not a fair sample (issue 42);
* ``dcg_bound``, ``pairs_bound`` (per bucket): the largest DCG@k, and the largest number of pairs in the
  top k (k(k − 1)/2), that one session can have: what the exact bound of an arm whose every session
  scored 0 (:mod:`.bounds`) needs. Defaults: the stream's default k (40 head, 20 otherwise) and the seed
  scale (the best grade's gain 1); :meth:`with_bounds` sets them from other settings. A bucket without
  a bound has no such bound (such an arm stays "inconclusive").

The error rate α is shared, in two ways:

* **between the two metrics of a pair, for regressions.** A pair is judged on DCG and PNR and is a
  regression if either regresses (:mod:`.overall`), so each metric decides a regression at
  ``regression_alpha`` = α / 2 (Bonferroni): a false regression of the pair stays below α. A pass needs
  both metrics to pass (an intersection-union test), which is valid at α for each, so the pass side keeps
  α. Each metric's interval is therefore [lower end at α, upper end at α / 2]: the truth lies below the
  lower end at some look with probability ≤ α (a false pass), above the upper end with probability ≤ α / 2
  (a false regression), and the interval contains the (1 − α) sequence, so it covers at 1 − α too;
* **between the confidence sequence and the exact bounds, on each side.** The sequence runs at
  ``sequence_alpha`` = α · (1 − 1/100) for the lower end and ``regression_sequence_alpha`` =
  α / 2 · (1 − 1/100) for the upper end; the exact bounds of an arm at 0 (:mod:`.bounds`) at
  ``bound_alpha`` = α / 100 and ``regression_bound_alpha`` = α / 2 / 100 (a union bound; the sequence's
  half-width grows by less than 0.1%).

The checks that say when a verdict cannot be trusted (:mod:`.checks`) run at ``check_alpha`` = α / 2
each; they are not part of the split above.

>>> CanaryConfig().alpha
0.05
>>> c = CanaryConfig()  # a regression's levels: half of a pass's
>>> c.regression_alpha, round(c.regression_sequence_alpha, 6), round(c.regression_bound_alpha, 6)
(0.025, 0.02475, 0.00025)
>>> round(c.sequence_alpha, 6), round(c.bound_alpha, 6)
(0.0495, 0.0005)
>>> CanaryConfig(alpha=1.5)
Traceback (most recent call last):
...
ValueError: alpha: must be in (0, 1), got 1.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

BOUND_SHARE = 0.01  # the share of α spent on the exact bounds of arms whose every session scored 0
DEFAULT_K = {"head": 40, "torso": 20, "tail": 20}


def dcg_bounds(k: Mapping[str, int], best_gain: float) -> dict[str, float]:
    """Per bucket the largest DCG@k a session can have: every one of its top k at the best gain,
    best_gain · Σ_{i ≤ k} 1 / log2(i + 1)."""
    return {bucket: best_gain * sum(1.0 / math.log2(i + 1.0) for i in range(1, depth + 1))
            for bucket, depth in k.items()}


def pairs_bounds(k: Mapping[str, int]) -> dict[str, float]:
    """Per bucket the number of pairs in a top k, k (k − 1) / 2: the most concordant, discordant or
    differently graded pairs one session can have."""
    return {bucket: depth * (depth - 1) / 2.0 for bucket, depth in k.items()}


@dataclass(frozen=True)
class CanaryConfig:
    alpha: float = 0.05
    min_relative_drop: float = 0.02
    min_sessions: int = 200
    mixture_sd: float = 0.05
    wide_sd: float = 1.0
    wide_weight: float = 0.05
    baseline_window: float = 86400.0
    time_matched: bool = True
    match_slot: float = 3600.0
    match_period: float = 86400.0
    sticky: bool = True
    adjust_queries: bool = True
    covariate_window: float = 86400.0
    covariate_min_sessions: int = 1
    settle: float = 4500.0
    dcg_bound: Mapping[str, float] = field(default_factory=lambda: dcg_bounds(DEFAULT_K, 1.0))
    pairs_bound: Mapping[str, float] = field(default_factory=lambda: pairs_bounds(DEFAULT_K))

    @property
    def mixture(self) -> tuple[tuple[float, float], ...]:
        """The mixture's components (τ, weight): the tuned one, and the wide one if it has weight."""
        if self.wide_weight == 0.0:
            return ((self.mixture_sd, 1.0),)
        return ((self.mixture_sd, 1.0 - self.wide_weight), (self.wide_sd, self.wide_weight))

    @property
    def regression_alpha(self) -> float:
        """The level at which each metric decides a regression: α / 2. A pair is judged on two metrics
        (DCG, PNR) and is a regression if either one regresses (:mod:`.overall`), so a false regression of
        the pair is bounded by the sum of the metrics' levels (Bonferroni): α / 2 each keeps it below α.
        A pass needs both metrics to pass, which is valid at α each, so passes keep ``alpha``."""
        return self.alpha / 2.0

    @property
    def sequence_alpha(self) -> float:
        """The level of the confidence sequence's lower end (what a pass reads): α less the share of the
        exact bounds."""
        return self.alpha * (1.0 - BOUND_SHARE)

    @property
    def regression_sequence_alpha(self) -> float:
        """The level of the confidence sequence's upper end (what a regression reads):
        ``regression_alpha`` less the share of the exact bounds."""
        return self.regression_alpha * (1.0 - BOUND_SHARE)

    @property
    def check_alpha(self) -> float:
        """The level of each of the two checks (sample ratio, covariate balance: :mod:`.checks`): α / 2, so
        that under a working split they raise a false alarm together in at most α of comparisons."""
        return self.alpha / 2.0

    @property
    def bound_alpha(self) -> float:
        """The level of the exact bounds of arms whose every session scored 0 (:mod:`.bounds`), for the
        lower end of the effect's interval (what a pass reads)."""
        return self.alpha * BOUND_SHARE

    @property
    def regression_bound_alpha(self) -> float:
        """The level of the exact bounds for the upper end of the effect's interval (what a regression
        reads): ``regression_alpha``'s share."""
        return self.regression_alpha * BOUND_SHARE

    def with_bounds(self, k: Mapping[str, int], best_gain: float | None) -> CanaryConfig:
        """This config with the bounds of a stream of depths ``k`` and a scale whose best gain is
        ``best_gain`` (None: gains without a maximum, e.g. TREC integers: no DCG bound)."""
        return replace(self, dcg_bound={} if best_gain is None else dcg_bounds(k, best_gain),
                       pairs_bound=pairs_bounds(k))

    def with_stream(self, join_window: float, idle_after: float) -> CanaryConfig:
        """This config with ``settle`` for a stream whose sessions close ``join_window`` after their
        impression, a quiet partition's ``idle_after`` later at the latest (``StreamConfig``)."""
        return replace(self, settle=join_window + idle_after)

    def __post_init__(self) -> None:
        for name in ("dcg_bound", "pairs_bound"):
            table = getattr(self, name)
            if not isinstance(table, Mapping) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                    for v in table.values()):
                raise ValueError(f"{name}: expected a table of bucket → a finite number > 0, got {table!r}")
        for name in ("time_matched", "sticky", "adjust_queries"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected true or false, got {getattr(self, name)!r}")
        for name in ("alpha", "min_relative_drop", "mixture_sd", "wide_sd", "wide_weight", "baseline_window",
                     "match_slot",
                     "match_period", "covariate_window", "settle"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha: must be in (0, 1), got {self.alpha!r}")
        if not 0.0 < self.min_relative_drop < 1.0:
            raise ValueError(f"min_relative_drop: must be in (0, 1), got {self.min_relative_drop!r}")
        if self.baseline_window <= 0.0:
            raise ValueError(f"baseline_window: must be > 0 seconds, got {self.baseline_window!r}")
        if self.settle < 0.0:
            raise ValueError(f"settle: must be ≥ 0 seconds, got {self.settle!r}")
        if self.covariate_window <= 0.0:
            raise ValueError(f"covariate_window: must be > 0 seconds, got {self.covariate_window!r}")
        least = self.covariate_min_sessions
        if isinstance(least, bool) or not isinstance(least, int) or least < 1:
            raise ValueError(f"covariate_min_sessions: expected an integer ≥ 1, got {least!r}")
        if self.match_slot <= 0.0:
            raise ValueError(f"match_slot: must be > 0 seconds, got {self.match_slot!r}")
        if self.match_period < self.match_slot:
            raise ValueError(f"match_period: must be at least match_slot ({self.match_slot!r} s), "
                             f"got {self.match_period!r}")
        if self.mixture_sd <= 0.0:
            raise ValueError(f"mixture_sd: must be > 0, got {self.mixture_sd!r}")
        if self.wide_sd <= 0.0:
            raise ValueError(f"wide_sd: must be > 0, got {self.wide_sd!r}")
        if not 0.0 <= self.wide_weight < 1.0:
            raise ValueError(f"wide_weight: must be in [0, 1), got {self.wide_weight!r}")
        sessions = self.min_sessions
        if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 2:
            raise ValueError(f"min_sessions: expected an integer ≥ 2, got {sessions!r}")
