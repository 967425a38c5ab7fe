"""RR@k: 1 / rank of the first relevant document in the top k, 0 if none
(``monitor/core/metrics/binary.py``)."""

from __future__ import annotations

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import FloatArray, Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.binary import reciprocal_rank
from monitor.core.ranked_batch import RankedBatch, relevant_hits


def value(measure: Measure, judged: JudgedList) -> float:
    return reciprocal_rank(judged.relevant, measure.cutoff)


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    lists, ranks, counts = relevant_hits(batch, measure.cutoff)
    first = counts == 1
    out = np.zeros(batch.n_lists, dtype=np.float64)
    out[lists[first]] = 1.0 / (ranks[first] + 1.0)
    return out


DEFINITION = register(MeasureDefinition(
    MeasureSpec("RR", "optional", {}, "reciprocal rank of the first relevant document"),
    value, batch=batch_value, aliases=("mrr",)))
