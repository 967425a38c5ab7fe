"""AP: trec_eval's average precision, Σ P@i over the relevant retrieved ranks i / relevant judged; AP@k:
seed 003's, the mean of P@i over the relevant ranks i ≤ k (``monitor/core/metrics/binary.py``)."""

from __future__ import annotations

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import FloatArray, Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.binary import average_precision, seed_average_precision
from monitor.core.ranked_batch import RankedBatch, relevant_hits, segment_sum


def value(measure: Measure, judged: JudgedList) -> float:
    if measure.cutoff is None:
        return average_precision(judged.relevant, judged.n_relevant)
    return seed_average_precision(judged.relevant, measure.cutoff)


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    k, n = measure.cutoff, batch.n_lists
    lists, ranks, counts = relevant_hits(batch, k)
    total = segment_sum(lists, counts / (ranks + 1.0), n)
    denominator = (batch.n_relevant.astype(np.float64) if k is None
                   else np.bincount(lists, minlength=n).astype(np.float64))
    out: FloatArray = np.divide(total, denominator, out=np.zeros(n, dtype=np.float64), where=denominator > 0)
    return out


DEFINITION = register(MeasureDefinition(
    MeasureSpec("AP", "optional", {}, "average precision (trec_eval; AP@k is seed 003's)"),
    value, batch=batch_value, aliases=("map",)))
