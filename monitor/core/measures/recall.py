"""R@k: relevant documents in the top k / relevant judged documents, 0 when none is relevant
(``monitor/core/metrics/binary.py``)."""

from __future__ import annotations

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import FloatArray, Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.binary import recall
from monitor.core.ranked_batch import RankedBatch, top_sum


def value(measure: Measure, judged: JudgedList) -> float:
    return recall(judged.relevant, measure.cutoff, judged.n_relevant)


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    hits = top_sum(batch, batch.relevant, measure.cutoff)
    relevant = batch.n_relevant.astype(np.float64)
    out: FloatArray = np.divide(hits, relevant, out=np.zeros(batch.n_lists, dtype=np.float64),
                                where=relevant > 0)
    return out


DEFINITION = register(MeasureDefinition(
    MeasureSpec("R", "required", {}, "recall at k"), value, batch=batch_value, aliases=("recall",)))
