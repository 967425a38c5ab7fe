"""The stream's settings, validated at construction (errors name the setting and the bad value)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from monitor.core.errors import MonitorError
from monitor.core.events import BUCKETS

DEFAULT_WINDOWS: Mapping[str, float] = {"15m": 900.0, "1h": 3600.0, "24h": 86400.0}
BudgetUnit = Literal["sessions", "judgments"]
BUDGET_UNITS: tuple[BudgetUnit, ...] = ("sessions", "judgments")
Undeclared = Literal["other", "dead_letter"]
UNDECLARED: tuple[Undeclared, ...] = ("other", "dead_letter")
OTHER = "other"  # the group part (ranker or variant) an undeclared impression is counted under
_LABEL_SAFE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class ConfigError(MonitorError):
    """A setting with a bad value."""


def _per_bucket(name: str, values: Mapping[str, float], minimum: float) -> None:
    if not isinstance(values, Mapping):
        raise ConfigError(f"{name} must be a table of the buckets {', '.join(BUCKETS)} "
                          f"(e.g. {{head = …, torso = …, tail = …}}), got {values!r}")
    missing = [b for b in BUCKETS if b not in values]
    extra = [b for b in values if b not in BUCKETS]
    if missing or extra:
        raise ConfigError(f"{name} needs exactly the buckets {', '.join(BUCKETS)}; "
                          f"missing {missing}, unknown {extra}")
    for bucket, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= minimum):
            raise ConfigError(f"{name}[{bucket}] must be a number ≥ {minimum}, got {value!r}")


@dataclass(frozen=True)
class StreamConfig:
    """What the join, the windows, the buckets and the sampling do. Times are event-time seconds."""

    k: Mapping[str, int] = field(default_factory=lambda: {"head": 40, "torso": 20, "tail": 20})
    join_window: float = 3600.0          # a session waits this long (event time) for its labels
    min_coverage: float = 0.8            # share of the top k that must be labelled to score at close
    state_ttl: float = 3 * 86400.0       # how long session state is kept for late labels and corrections
    windows: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WINDOWS))
    slices_per_window: int = 15          # a rolling window is the merge of this many time slices
    budget_period: float = 3600.0        # annotation budget per bucket per this many seconds, paced over
                                         # them (sampling.allowance)
    budget: Mapping[str, float] = field(default_factory=lambda: {"head": 2000.0, "torso": 2000.0,
                                                                 "tail": 2000.0})
    budget_unit: BudgetUnit = "sessions"  # what ``budget`` counts: sampled sessions, or documents requested
    share_session_grades: bool = True    # a session's grades are its query's too (reused by other sessions)
    frequency_window: float = 86400.0    # trailing window of the query-frequency estimate
    frequency_slices: int = 24
    head_min_frequency: float = 1000.0   # queries seen at least this often in the window are head
    torso_min_frequency: float = 50.0    # ... this often torso, the rest tail
    sketch_width: int = 2048
    sketch_depth: int = 4
    max_closes_per_step: int = 200
    epoch: float = 900.0                 # canary history: session statistics summed per epoch of this width
    history: float = 7 * 86400.0         # ... kept this long (the oldest deploy a comparison can reach)
    max_future: float = 86400.0          # an impression or deploy this far ahead of the wall clock: dead
                                         # letter ts_out_of_range (and one older than state_ttl behind)
    query_history: bool = True           # ... and each query's DCG per epoch (query-difficulty adjustment)
    idle_after: float = 900.0            # a partition this far behind the others is quiet: its sessions
                                         # close by the others' event time minus this (join.quiet_horizon)
    max_early_sessions: int = 10_000     # sessions per partition whose labels wait for their impression;
                                         # beyond it the oldest are evicted (counted): a ghost-label flood
                                         # cannot grow memory
    # the variants that count (an impression without one is "control"); empty: any variant counts
    variants: tuple[str, ...] = ("control", "canary")
    ranker_pattern: str | None = None    # a regex every ranker name must match in full (None: any ranker)
    undeclared: Undeclared = "other"     # an impression of another variant or ranker: counted as "other"
                                         # (never sampled), or a dead letter undeclared_variant/_ranker

    def __post_init__(self) -> None:
        self._check_declared()
        _per_bucket("k", self.k, 1)
        for bucket, k in self.k.items():
            if not isinstance(k, int) or isinstance(k, bool):
                raise ConfigError(f"k[{bucket}] must be an integer, got {k!r}")
        _per_bucket("budget", self.budget, 0)
        if not isinstance(self.share_session_grades, bool):
            raise ConfigError("share_session_grades must be true or false, "
                              f"got {self.share_session_grades!r}")
        if not isinstance(self.query_history, bool):
            raise ConfigError(f"query_history must be true or false, got {self.query_history!r}")
        if self.budget_unit not in BUDGET_UNITS:
            raise ConfigError(f"budget_unit must be one of {', '.join(BUDGET_UNITS)}, "
                              f"got {self.budget_unit!r}")
        positive = {"join_window": self.join_window, "state_ttl": self.state_ttl,
                    "budget_period": self.budget_period, "frequency_window": self.frequency_window,
                    "epoch": self.epoch, "history": self.history, "max_future": self.max_future,
                    "idle_after": self.idle_after}
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.state_ttl < self.join_window:
            raise ConfigError(f"state_ttl ({self.state_ttl}) must be at least "
                              f"join_window ({self.join_window})")
        if self.history < self.epoch:
            raise ConfigError(f"history ({self.history}) must be at least epoch ({self.epoch})")
        if not 0.0 <= self.min_coverage <= 1.0:
            raise ConfigError(f"min_coverage must be in [0, 1], got {self.min_coverage!r}")
        if not self.windows:
            raise ConfigError("windows must name at least one rolling window")
        for name, seconds in self.windows.items():
            if not name or not name.replace("_", "").isalnum():
                raise ConfigError(f"window name {name!r} must be alphanumeric (it is a label value)")
            if not (math.isfinite(seconds) and seconds > 0):
                raise ConfigError(f"window {name} must be a positive number of seconds, got {seconds!r}")
        for name, count in {"slices_per_window": self.slices_per_window,
                            "frequency_slices": self.frequency_slices, "sketch_width": self.sketch_width,
                            "sketch_depth": self.sketch_depth,
                            "max_closes_per_step": self.max_closes_per_step,
                            "max_early_sessions": self.max_early_sessions}.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ConfigError(f"{name} must be a positive integer, got {count!r}")
        if not 0 <= self.torso_min_frequency <= self.head_min_frequency:
            raise ConfigError("need 0 ≤ torso_min_frequency ≤ head_min_frequency, got "
                              f"{self.torso_min_frequency} and {self.head_min_frequency}")

    def _check_declared(self) -> None:
        variants = self.variants
        if isinstance(variants, str) or not isinstance(variants, (list, tuple)):
            raise ConfigError(f"variants must be a list of variant names (empty: any variant), "
                              f"got {variants!r}")
        for name in variants:
            if not isinstance(name, str) or not _LABEL_SAFE.fullmatch(name):
                raise ConfigError(f"variants: {name!r} is not a variant name (1 to 64 of A-Z a-z 0-9 "
                                  "_ . : -; it is a label value)")
            if name == OTHER:
                raise ConfigError(f"variants: {OTHER!r} is reserved (undeclared variants are counted as it)")
        if len(set(variants)) != len(variants):
            raise ConfigError(f"variants: a name given twice in {list(variants)}")
        object.__setattr__(self, "variants", tuple(variants))  # a TOML list becomes a tuple (hashable)
        pattern = self.ranker_pattern
        if pattern is not None:
            if not isinstance(pattern, str) or not pattern:
                raise ConfigError(f"ranker_pattern must be a non-empty regular expression (leave it out to "
                                  f"accept any ranker), got {pattern!r}")
            try:
                re.compile(pattern)
            except re.error as error:
                raise ConfigError(f"ranker_pattern {pattern!r} is not a valid regular expression: {error}"
                                  ) from None
        if self.undeclared not in UNDECLARED:
            raise ConfigError(f"undeclared must be one of {', '.join(UNDECLARED)}, got {self.undeclared!r}")

    def slice_width(self, window: str) -> float:
        return self.windows[window] / self.slices_per_window


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k if _BARE_KEY.fullmatch(k) else _toml_value(k)} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"no TOML for {value!r}")


def stream_toml(config: StreamConfig) -> str:
    """The ``[stream]`` table of a worker's settings file (docs/worker.md) that gives ``config``: the
    settings that differ from the defaults, one per line (a setting left at ``None`` has no TOML)."""
    default = StreamConfig()
    lines = ["[stream]"]
    for name in StreamConfig.__dataclass_fields__:
        value = getattr(config, name)
        if value != getattr(default, name):
            if value is None:
                raise ConfigError(f"{name} = None differs from its default and has no TOML")
            lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
