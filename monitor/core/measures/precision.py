"""P@k: relevant documents in the top k / k (``monitor/core/metrics/binary.py``)."""

from __future__ import annotations

from typing import cast

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import FloatArray, Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.binary import precision
from monitor.core.ranked_batch import RankedBatch, top_sum


def value(measure: Measure, judged: JudgedList) -> float:
    return precision(judged.relevant, cast(int, measure.cutoff))


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    k = cast(int, measure.cutoff)
    return top_sum(batch, batch.relevant, k) / float(k)


DEFINITION = register(MeasureDefinition(
    MeasureSpec("P", "required", {}, "precision at k"), value, batch=batch_value, aliases=("precision",)))
