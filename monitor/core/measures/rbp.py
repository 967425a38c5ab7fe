"""RBP(p)@k: rank-biased precision, (1 − p) Σ_{i≤k} g_i p^(i−1) (Moffat & Zobel 2008;
``monitor/core/metrics/cascade.py``). p has no default."""

from __future__ import annotations

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.params import probability
from monitor.core.measures.registry import Measure, MeasureDefinition, MeasureSpec, ParamSpec, register
from monitor.core.metrics.cascade import rbp
from monitor.core.ranked_batch import FloatArray, RankedBatch, segment_sum, top


def value(measure: Measure, judged: JudgedList) -> float:
    return rbp(judged.gains, float(measure.param("p")), measure.cutoff)


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    ids, ranks = batch.segments
    p = float(measure.param("p"))
    weights = (1.0 - p) * batch.gains * np.power(p, ranks.astype(np.float64))
    return segment_sum(ids, top(ranks, weights, measure.cutoff), batch.n_lists)


DEFINITION = register(MeasureDefinition(
    MeasureSpec("RBP", "optional", {"p": ParamSpec(probability(True), None, "0<p<1")},
                "rank-biased precision"),
    value, batch=batch_value))
