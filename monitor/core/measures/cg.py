"""CG@k: cumulative gain of the top k, Σ_{i≤k} g_i (``monitor/core/metrics/gain.py``)."""

from __future__ import annotations

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import FloatArray, Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.gain import cg
from monitor.core.ranked_batch import RankedBatch, top_sum


def value(measure: Measure, judged: JudgedList) -> float:
    return cg(judged.gains, measure.cutoff)


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    return top_sum(batch, batch.gains, measure.cutoff)


DEFINITION = register(MeasureDefinition(
    MeasureSpec("CG", "optional", {}, "cumulative gain of the top k"), value, batch=batch_value))
