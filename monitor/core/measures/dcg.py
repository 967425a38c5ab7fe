"""DCG@k: discounted cumulative gain of the top k, the online headline (``monitor/core/metrics/gain.py``:
Σ_{i≤k} g_i / log2(i + 1); ``gain=exp``: 2^g − 1; ``discount=jk``: Järvelin–Kekäläinen's first form).

Its parameters and :func:`segmented_dcg`, the DCG of every list of a batch in one pass, are nDCG's too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.params import choice
from monitor.core.measures.registry import Measure, MeasureDefinition, MeasureSpec, ParamSpec, register
from monitor.core.metrics.gain import Discount, Gain, dcg, discounts, transform_gains
from monitor.core.ranked_batch import (
    FloatArray,
    IntArray,
    RankedBatch,
    head,
    head_sum,
    segment_ids,
    segment_sum,
)

GAIN_PARAMS = {
    "gain": ParamSpec(choice("linear", "exp"), "linear", "linear|exp"),
    "discount": ParamSpec(choice("log2", "jk"), "log2", "log2|jk"),
}


def gain_and_discount(measure: Measure) -> tuple[Gain, Discount]:
    """The gain transform and discount a measure with :data:`GAIN_PARAMS` names."""
    if not measure.params:  # the defaults, without reading them (the stream asks for every session)
        return "linear", "log2"
    gain: Gain = "exponential" if measure.param("gain") == "exp" else "linear"
    return gain, cast(Discount, measure.param("discount"))


def value(measure: Measure, judged: JudgedList) -> float:
    return dcg(judged.gains, measure.cutoff, *gain_and_discount(measure))


def segmented_dcg(gains: FloatArray, offsets: IntArray, k: int | None, gain: Gain, discount: Discount,
                  segments: Callable[[], tuple[IntArray, IntArray]] | None = None) -> FloatArray:
    """DCG@k of every segment of ``gains`` (cut by ``offsets``): over the first k rows of each as a
    matrix when that is smaller, else one pass over every row (``segments``: their (segment, rank), if
    known already)."""
    n = offsets.size - 1
    if gains.size == 0:
        return np.zeros(n, dtype=np.float64)
    rows = None if k is None else head(offsets, k)
    if rows is not None:
        return head_sum(gains, rows, discounts(rows[0].shape[1], discount), gain)
    ids, ranks = segment_ids(offsets) if segments is None else segments()
    table = discounts(int(ranks.max()) + 1, discount)
    weights = transform_gains(gains, gain) * table[ranks]
    if k is not None:
        weights = np.where(ranks < k, weights, 0.0)
    return segment_sum(ids, weights, n)


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    return segmented_dcg(batch.gains, batch.offsets, measure.cutoff, *gain_and_discount(measure),
                         lambda: batch.segments)


DEFINITION = register(MeasureDefinition(
    MeasureSpec("DCG", "optional", GAIN_PARAMS, "discounted cumulative gain (online headline)"),
    value, batch=batch_value))
