"""The settings of one bucket's simulated world (:mod:`monitor.sim.world` explains what each one models),
checked when they are made, and the defaults of the head, torso and tail buckets."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HOURS = 24


def _number(settings: object, name: str) -> float:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def _integer(settings: object, name: str, least: int) -> int:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name}: expected an integer ≥ {least}, got {value!r}")
    return value


@dataclass(frozen=True)
class WorldSettings:
    """One bucket's world (module docstring): list depth, queries and their popularity, documents and
    their grades, the ranker's signal and noise, and the time-of-day mix."""

    k: int = 20
    queries: int = 20_000
    zipf: float = 0.2
    outcomes: int = 16
    pool: int = 100
    relevant_logit: float = -2.4
    difficulty_sd: float = 1.0
    grade_tilt: float = 0.5
    available: float = 0.6
    available_spread: float = 0.6
    weight: float = 1.0
    doc_noise: float = 0.7
    noise: float = 1.5
    night_dip: float = 0.0
    dip_hour: float = 3.0
    new_share: float = 0.0
    new_docs: int = 0
    new_logit_shift: float = -1.0
    new_boost: float = 1.0

    @property
    def new_count(self) -> int:
        """Documents per query only the candidate retrieves (``new_docs``, or by default enough for its
        share of a full list and at least ``new_share`` · ``pool``); 0 without them."""
        if self.new_share == 0:
            return 0
        return self.new_docs or max(math.ceil(self.new_share * self.pool), math.ceil(self.new_share * self.k))

    def __post_init__(self) -> None:
        _integer(self, "k", 1)
        _integer(self, "queries", 1)
        _integer(self, "outcomes", 1)
        _integer(self, "pool", 1)
        _integer(self, "new_docs", 0)
        for name in ("zipf", "relevant_logit", "difficulty_sd", "grade_tilt", "available",
                     "available_spread", "weight", "doc_noise", "noise", "night_dip", "dip_hour", "new_share",
                     "new_logit_shift", "new_boost"):
            _number(self, name)
        if self.zipf < 0:
            raise ValueError(f"zipf: must be ≥ 0, got {self.zipf!r}")
        if not 0.0 < self.available <= 1.0:
            raise ValueError(f"available: must be in (0, 1], got {self.available!r}")
        if self.available_spread <= 0:
            raise ValueError(f"available_spread: must be > 0, got {self.available_spread!r}")
        for name in ("difficulty_sd", "grade_tilt", "weight", "doc_noise", "noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be ≥ 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.night_dip < 0.5:
            raise ValueError(f"night_dip: must be in [0, 0.5), got {self.night_dip!r}")
        if not 0.0 <= self.dip_hour < HOURS:
            raise ValueError(f"dip_hour: must be in [0, 24), got {self.dip_hour!r}")
        if not 0.0 <= self.new_share < 1.0:
            raise ValueError(f"new_share: must be in [0, 1), got {self.new_share!r}")
        if self.new_share > 0 and self.new_docs and self.new_docs < math.ceil(self.new_share * self.k):
            raise ValueError(f"new_docs: must hold the candidate's share of a full list "
                             f"({math.ceil(self.new_share * self.k)}), got {self.new_docs!r}")
        if self.pool + self.new_count > np.iinfo(np.int16).max:
            raise ValueError(f"pool: at most {np.iinfo(np.int16).max} documents per query with the new ones, "
                             f"got {self.pool + self.new_count}")


DEFAULT_SETTINGS: dict[str, WorldSettings] = {
    "head": WorldSettings(k=40, queries=1_000, zipf=0.8, outcomes=128, pool=200, relevant_logit=-2.5,
                          difficulty_sd=1.1, available=0.55, available_spread=0.7),
    "torso": WorldSettings(k=20, queries=5_000, zipf=0.4, outcomes=24, pool=120, relevant_logit=-2.6,
                           difficulty_sd=1.1),
    "tail": WorldSettings(),
}
