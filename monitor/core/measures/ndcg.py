"""nDCG@k: DCG@k / ideal DCG@k, the ideal from every labelled document of the query; 0 when the ideal is 0
(``monitor/core/metrics/gain.py``). Parameters as DCG's."""

from __future__ import annotations

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.dcg import GAIN_PARAMS, gain_and_discount, segmented_dcg
from monitor.core.measures.registry import FloatArray, Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.gain import ndcg
from monitor.core.ranked_batch import RankedBatch


def value(measure: Measure, judged: JudgedList) -> float:
    return ndcg(judged.gains, judged.pool_gains, measure.cutoff, *gain_and_discount(measure))


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    k, (gain, discount) = measure.cutoff, gain_and_discount(measure)
    values = segmented_dcg(batch.gains, batch.offsets, k, gain, discount, lambda: batch.segments)
    ideal = segmented_dcg(batch.pool_gains, batch.pool_offsets, k, gain, discount)
    out: FloatArray = np.divide(values, ideal, out=np.zeros(batch.n_lists, dtype=np.float64),
                                where=ideal != 0.0)
    return out


DEFINITION = register(MeasureDefinition(
    MeasureSpec("nDCG", "optional", GAIN_PARAMS, "DCG / ideal DCG from all labelled documents"),
    value, batch=batch_value, aliases=("ndcg",)))
