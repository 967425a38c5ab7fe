"""The canary test's settings: one frozen value, validated at construction.

* ``alpha`` (0.05): the confidence sequence covers the true relative change at *every* session with
  probability ≥ 1 − alpha, so looking after each session is allowed;
* ``min_relative_drop`` (0.02): the smallest relative drop worth a "regression"; "pass" means the
  sequence rules out a drop this large (``docs/canary.md`` says why 2%);
* ``min_sessions`` (200 per arm): below this either arm is too small for the normal approximation of
  zero-inflated DCG, and the verdict is "inconclusive" whatever the numbers say;
* ``mixture_sd`` (0.05): τ, the standard deviation of the normal mixture over the log ratio (the mSPRT
  "prior"). The sequence is tightest when its half-width is ≈ 1.07 τ, i.e. around drops of 5%;
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
  the looks, one per epoch of the period (:func:`.paths.sticky_path`), so it does not flap.

>>> CanaryConfig().alpha
0.05
>>> CanaryConfig(alpha=1.5)
Traceback (most recent call last):
...
ValueError: alpha: must be in (0, 1), got 1.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CanaryConfig:
    alpha: float = 0.05
    min_relative_drop: float = 0.02
    min_sessions: int = 200
    mixture_sd: float = 0.05
    baseline_window: float = 86400.0
    time_matched: bool = True
    match_slot: float = 3600.0
    match_period: float = 86400.0
    sticky: bool = True
    adjust_queries: bool = True
    covariate_window: float = 86400.0
    covariate_min_sessions: int = 1

    def __post_init__(self) -> None:
        for name in ("time_matched", "sticky", "adjust_queries"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected true or false, got {getattr(self, name)!r}")
        for name in ("alpha", "min_relative_drop", "mixture_sd", "baseline_window", "match_slot",
                     "match_period", "covariate_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha: must be in (0, 1), got {self.alpha!r}")
        if not 0.0 < self.min_relative_drop < 1.0:
            raise ValueError(f"min_relative_drop: must be in (0, 1), got {self.min_relative_drop!r}")
        if self.baseline_window <= 0.0:
            raise ValueError(f"baseline_window: must be > 0 seconds, got {self.baseline_window!r}")
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
        sessions = self.min_sessions
        if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 2:
            raise ValueError(f"min_sessions: expected an integer ≥ 2, got {sessions!r}")
