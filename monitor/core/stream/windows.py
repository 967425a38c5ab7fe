"""Time slices and rolling windows, in event time.

A window of length W is cut into ``slices_per_window`` slices of width w = W / n; slice i covers
[i·w, (i+1)·w). The rolling window at watermark t is the merge of the n slices ending with the one that
holds t: ``slice(t) − n + 1 … slice(t)``, so it spans between W − w and W seconds back. Aggregates are
stored per slice, never as lists of events.

>>> slice_index(125.0, 60.0), window_slices(125.0, 60.0, 3)
(2, range(0, 3))
"""

from __future__ import annotations

import math


def slice_index(ts: float, width: float) -> int:
    return math.floor(ts / width)


def window_slices(watermark: float, width: float, count: int) -> range:
    last = slice_index(watermark, width)
    return range(last - count + 1, last + 1)
