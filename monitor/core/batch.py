"""Measures over many ranked lists at once: per-list values and aggregates over a :class:`RankedBatch`.

A measure whose definition (``monitor/core/measures/``) has a vectorised ``batch`` value computes every
list in a few numpy passes over the batch's segmented arrays (``monitor/core/ranked_batch.py``); the others
(AUC, KendallTau, and PNR, whose aggregate needs each list's pair counts) go list by list through their
per-list value. Results equal :func:`monitor.core.evaluation.compute` on each list (tested to 1e-12).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np

from monitor.core.aggregates import Mean
from monitor.core.evaluation import MeasureAggregate
from monitor.core.measures import Measure, lookup
from monitor.core.ranked_batch import RankedBatch

__all__ = ["RankedBatch", "evaluate_batch", "measure_values"]


def measure_values(measure: Measure, batch: RankedBatch) -> list[float | None]:
    """Per-list values of one measure for every list of the batch."""
    definition = lookup(measure.name)
    if definition.batch is None:
        return [definition.value(measure, batch.judged_list(g)) for g in range(batch.n_lists)]
    return cast(list[float | None], definition.batch(measure, batch).tolist())


def evaluate_batch(
    measures: Iterable[Measure], batch: RankedBatch
) -> tuple[dict[Measure, float | None], dict[Measure, list[float | None]]]:
    """Aggregate (mean over lists; for a measure defined by a pair ratio, PNR, the ratio of summed pair
    counts) and per-list values of each measure."""
    aggregate: dict[Measure, float | None] = {}
    per_list: dict[Measure, list[float | None]] = {}
    for measure in dict.fromkeys(measures):
        if lookup(measure.name).pairs is not None:
            pairs = MeasureAggregate(measure)
            per_list[measure] = [pairs.add(batch.judged_list(g)) for g in range(batch.n_lists)]
            aggregate[measure] = pairs.get()
            continue
        values = measure_values(measure, batch)
        per_list[measure] = values
        defined = np.array([v for v in values if v is not None], dtype=np.float64)
        # (defined * defined).sum(), not np.dot: a BLAS call wakes threads that then spin on the other core
        mean = Mean(int(defined.size), float(defined.sum()), float((defined * defined).sum()))
        aggregate[measure] = mean.get()
    return aggregate, per_list
