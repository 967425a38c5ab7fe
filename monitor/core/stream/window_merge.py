"""Rolling windows from time-sliced statistics: merge the window's slices across partitions and groups.

Input: for each partition, ``{(window, slice index): {group: Stats}}``. Output: ``{(window, group):
Stats}`` at a watermark (the largest event time seen on any partition, so a replay of the same stream
gives the same windows whatever the wall clock says).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.stats import Stats
from monitor.core.stream.windows import slice_index, window_slices

SliceKey = tuple[str, int]
Sliced = Mapping[SliceKey, Mapping[str, Mapping[str, float]]]


def slice_keys(ts: float, config: StreamConfig) -> list[SliceKey]:
    """The slice of each window that an event at ``ts`` falls in."""
    return [(window, slice_index(ts, config.slice_width(window))) for window in config.windows]


def wanted_slices(watermark: float, config: StreamConfig) -> list[SliceKey]:
    return [(window, index) for window in config.windows
            for index in window_slices(watermark, config.slice_width(window), config.slices_per_window)]


def rollup(partitions: Iterable[Sliced], watermark: float,
           config: StreamConfig) -> dict[tuple[str, str], Stats]:
    if not math.isfinite(watermark):
        return {}
    wanted = wanted_slices(watermark, config)
    out: dict[tuple[str, str], Stats] = {}
    for sliced in partitions:
        for key in wanted:
            for group, stats in sliced.get(key, {}).items():
                out.setdefault((key[0], group), Stats()).add(stats)
    return out
