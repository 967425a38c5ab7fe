"""What ``monitor demo`` simulates and how fast: one frozen value, validated at construction.

The simulated traffic covers ``hours`` of event time and is played back in ``duration`` wall seconds, so
event time runs ``hours × 3600 / duration`` times faster than the wall clock (6 h in 20 s: 1,080×). The
stream runs with its production settings (:class:`~monitor.core.stream.config.StreamConfig` defaults:
k = 40 head, 20 torso and tail; a one-hour join window; 15 m, 1 h and 24 h rolling windows), but for the
annotation budget, which ``budget`` and ``budget_unit`` may change.

>>> DemoSettings().speed
1080.0
>>> DemoSettings(bucket="middle")
Traceback (most recent call last):
...
ValueError: bucket: 'middle' is not one of head, torso, tail, all
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

from monitor.core.stream.config import BudgetUnit, StreamConfig
from monitor.sim import ShadowSpec, SimConfig
from monitor.sim.config import DEFAULT_START_TS, REGRESSION_BUCKETS

DEFAULT_SESSIONS = 10_000
DEFAULT_HOURS = 6.0
DEFAULT_DURATION = 20.0
SAMPLE_EVERY = 120.0  # event-time seconds between two points of the recorded series
SHADOW_CANDIDATE = ShadowSpec("ranker-c", drop=0.10, bucket="tail")
"""``--shadow``: a candidate ranker 10% worse (DCG@k) in the tail than the served rankers' healthy lists."""


@dataclass(frozen=True)
class DemoSettings:
    """``sessions`` impressions over ``hours`` of event time, played in ``duration`` wall seconds.

    ``regression`` is the canary's relative DCG@k loss in ``bucket`` (0: a healthy canary); a small share
    of malformed events (``invalid_rate``) shows the dead-letter path. ``forever`` repeats the run, each
    round a new seed and the next ``hours`` of event time, until interrupted. ``budget`` (per bucket per
    hour of event time; None: the production default) and ``budget_unit`` set the annotation budget.
    ``shadow`` adds a shadow candidate (:data:`SHADOW_CANDIDATE`) to every impression, judged beside the
    canary against the lists served to the same sessions; the served traffic and its labels are unchanged.
    """

    duration: float = DEFAULT_DURATION
    hours: float = DEFAULT_HOURS
    sessions: int = DEFAULT_SESSIONS
    seed: int = 1
    regression: float = 0.10
    bucket: str = "tail"
    invalid_rate: float = 0.001
    forever: bool = False
    budget: float | None = None
    budget_unit: str = "sessions"
    shadow: bool = False

    def __post_init__(self) -> None:
        for name in ("duration", "hours"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a positive number of seconds/hours, got {value!r}")
        if isinstance(self.sessions, bool) or not isinstance(self.sessions, int) or self.sessions < 1:
            raise ValueError(f"sessions: expected a positive integer, got {self.sessions!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")
        if not (isinstance(self.regression, (int, float)) and 0.0 <= self.regression < 1.0):
            raise ValueError(f"regression: a relative loss in [0, 1), got {self.regression!r}")
        if self.bucket not in REGRESSION_BUCKETS:
            raise ValueError(f"bucket: {self.bucket!r} is not one of {', '.join(REGRESSION_BUCKETS)}")
        if not 0.0 <= self.invalid_rate <= 0.5:
            raise ValueError(f"invalid_rate: must be in [0, 0.5], got {self.invalid_rate!r}")
        stream_config(self.budget, self.budget_unit)  # a bad budget raises ConfigError, a ValueError

    @property
    def span(self) -> float:
        """Event-time seconds of one round of traffic."""
        return self.hours * 3600.0

    @property
    def speed(self) -> float:
        """Event-time seconds per wall second."""
        return self.span / self.duration

    def stream_config(self) -> StreamConfig:
        """The stream's settings of this run (see :func:`stream_config`)."""
        return stream_config(self.budget, self.budget_unit)

    def sim_config(self, round_: int = 0) -> SimConfig:
        """The simulator's settings for round ``round_`` (0 unless ``forever``).

        Every impression carries its bucket (``bucket_hint_share=1``): with hours compressed into
        seconds, the count-min estimate of query frequency (tuned for a day of real traffic) would put
        head queries in the torso, so the demo lets upstream name the bucket, as it may in production.
        """
        return SimConfig(
            seed=self.seed + round_, n_sessions=self.sessions, duration_s=self.span,
            start_ts=DEFAULT_START_TS + round_ * self.span, id_prefix=f"r{round_}" if round_ else "s",
            regression=self.regression, regression_bucket=self.bucket, bucket_hint_share=1.0,
            invalid_rate=self.invalid_rate, shadow=(SHADOW_CANDIDATE,) if self.shadow else ())


def stream_config(budget: float | None = None, budget_unit: str = "sessions") -> StreamConfig:
    """The stream's settings in the demo and in replays: the production defaults, with ``budget`` (the
    same for every bucket, per hour of event time; None: the default) counted in ``budget_unit``.

    >>> stream_config(500, "judgments").budget["tail"]
    500
    >>> stream_config(budget_unit="documents")
    Traceback (most recent call last):
    ...
    monitor.core.stream.config.ConfigError: budget_unit must be one of sessions, judgments, got 'documents'
    """
    unit = cast(BudgetUnit, budget_unit)  # checked by StreamConfig
    if budget is None:
        return StreamConfig(budget_unit=unit)
    return StreamConfig(budget=dict.fromkeys(StreamConfig().budget, budget), budget_unit=unit)
