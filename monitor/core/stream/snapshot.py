"""What an exporter reads: the rolled-up state of the stream at one moment (from memory or from Redis)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter
from monitor.core.stream.stats import Stats


@dataclass(frozen=True)
class Snapshot:
    """``windows``: (window, group) → stats at ``watermark``; ``counters``: each
    :class:`~monitor.core.stream.counters.Counter` → total;
    ``added``/``removed``: group → cumulative sums of session statistics added and taken back."""

    config: StreamConfig
    watermark: float
    windows: Mapping[tuple[str, str], Stats]
    counters: Mapping[Counter, float]
    added: Mapping[str, Stats]
    removed: Mapping[str, Stats]

    def totals(self) -> dict[str, Stats]:
        """Group → cumulative statistics since the start: added minus taken back, field by field (what
        the canary verdicts compare)."""
        out: dict[str, Stats] = {}
        for group, stats in self.added.items():
            out.setdefault(group, Stats()).add(stats)
        for group, stats in self.removed.items():
            out.setdefault(group, Stats()).take_back(stats)
        return out
