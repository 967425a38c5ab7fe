"""95% intervals of a group's mean DCG@k and PNR, from its flat Stats (sums and second moments).

DCG@k: the normal-approximation interval of the mean (:func:`~monitor.core.stream.stats.summarise`).
PNR = ΣP / ΣN (positive over negative pairs): the delta-method variance of log PNR
(:func:`monitor.core.canary.estimates.log_statistic`, the canary test's own estimate), so the interval
exp(log PNR ± z·sd) is asymmetric and stays positive. None where undefined (no sessions, no inversions,
fewer than two sessions).

Three sessions with 3, 4 and 5 positive pairs and one inversion each (PNR 4; s²_P = 1, N constant):

>>> lo, hi = pnr_interval({"sessions": 3, "concordant": 12, "discordant": 3, "grade_tied": 0,
...                        "pnr_pos_sq": 50, "pnr_neg_sq": 3, "pnr_pos_neg": 12})
>>> round(lo, 2), round(hi, 2)  # exp(log 4 ± 1.96 · √(1 / 16 / 3))
(3.01, 5.31)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.core.aggregates import Z_95
from monitor.core.canary.estimates import log_statistic


def pnr_interval(stats: Mapping[str, float], z: float = Z_95) -> tuple[float, float] | None:
    estimate = log_statistic(stats, "pnr")
    if estimate.value is None or estimate.variance is None:
        return None
    half = z * math.sqrt(estimate.variance)
    return math.exp(estimate.value - half), math.exp(estimate.value + half)
