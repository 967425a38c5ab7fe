"""ERR(p)@k: expected reciprocal rank, Σ_{r≤k} (1/r) R_r Π_{i<r} p (1 − R_i), R = (2^level − 1) / 2^max_level
(Chapelle et al. 2009, p: seed 003's continuation probability; ``monitor/core/metrics/cascade.py``).

The batch value fills a lists × depth matrix; past :data:`PADDED_LIMIT` cells it goes list by list.
"""

from __future__ import annotations

import numpy as np

from monitor.core.judged import JudgedList
from monitor.core.measures.params import probability
from monitor.core.measures.registry import Measure, MeasureDefinition, MeasureSpec, ParamSpec, register
from monitor.core.metrics.cascade import err, satisfaction
from monitor.core.ranked_batch import FloatArray, RankedBatch

PADDED_LIMIT = 20_000_000  # cells of the lists × depth matrix before falling back to a loop over lists


def value(measure: Measure, judged: JudgedList) -> float:
    return err(judged.levels, judged.max_level, measure.cutoff, float(measure.param("p")))


def batch_value(measure: Measure, batch: RankedBatch) -> FloatArray:
    k, p, n = measure.cutoff, float(measure.param("p")), batch.n_lists
    sizes = np.diff(batch.offsets)
    width = int(sizes.max()) if sizes.size else 0
    width = width if k is None else min(width, k)
    if n * width > PADDED_LIMIT:
        return np.array([value(measure, batch.judged_list(g)) for g in range(n)], dtype=np.float64)
    ids, ranks = batch.segments
    keep = ranks < width
    r = np.zeros((n, width), dtype=np.float64)
    r[ids[keep], ranks[keep]] = satisfaction(batch.levels[keep], batch.max_level)
    reach = np.ones_like(r)
    if width > 1:
        reach[:, 1:] = np.cumprod(p * (1.0 - r[:, :-1]), axis=1)
    out: FloatArray = (reach * r / np.arange(1, width + 1, dtype=np.float64)).sum(axis=1)
    return out


DEFINITION = register(MeasureDefinition(
    MeasureSpec("ERR", "optional", {"p": ParamSpec(probability(False), 1.0, "0<p<=1")},
                "expected reciprocal rank"),
    value, batch=batch_value))
