"""Runs compared with a baseline, per measure, over the same queries: what ``monitor evaluate QRELS
BASELINE RUN ...`` prints (docs/evaluate.md, "Comparing runs").

* **Queries.** A comparison pairs each query's value in a run with its value in the baseline, so it
  runs over the queries evaluated in *every* run (the lists of every :class:`RankedBatch`, in the
  baseline's order). As when evaluating one run, a judged query missing from a run is not evaluated for
  that run, so it has no pair and is left out of every comparison (``missing`` counts, per run, the
  queries evaluated in another run but not in it); with ``--complete`` (trec_eval ``-c``) every judged
  query is a list of every run, a missing one scoring 0, and none is left out. Queries of a run without
  judgments are never evaluated (as trec_eval).
* **A mean measure**: each run's mean over the common queries; a compared run's row pairs the queries
  where both values are defined (all of them except for AUC, undefined on a one-class list), and its
  difference is the mean of the per-query differences (= its mean − the baseline's mean over the same
  queries), tested by :func:`~monitor.core.paired.paired_t` and
  :func:`~monitor.core.paired.randomization_p`.
* **A ratio measure** (PNR): each run's value is the ratio of the pair counts summed over the common
  queries, as for one run; the difference is tested by the delta method and by swapping each query's
  pair counts between the runs (:func:`~monitor.core.paired.paired_ratio_t`,
  :func:`~monitor.core.paired.ratio_randomization_p`), never on the per-query ratios.
* **Significance**: the p-value of the chosen test (``t`` or ``randomization``), adjusted over the runs
  compared with the baseline on the same measure (``holm``, ``bonferroni``, or ``none``), below ``alpha``.
  The interval is at level 1 − ``alpha`` (95% at the default), not adjusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from monitor.core.batch import measure_values
from monitor.core.measures import Measure, PairRatio, lookup
from monitor.core.metrics.pairs import PairCounts
from monitor.core.paired import (
    CORRECTIONS,
    DEFAULT_ITERATIONS,
    Correction,
    FloatArray,
    TTest,
    adjust,
    paired_ratio_t,
    paired_t,
    randomization_p,
    ratio_randomization_p,
)
from monitor.core.ranked_batch import RankedBatch

TestName = Literal["t", "randomization"]
TESTS: tuple[TestName, ...] = ("t", "randomization")


@dataclass(frozen=True)
class CompareSettings:
    """How runs are compared: the level ``alpha`` (significance below it, intervals at 1 − alpha), the
    randomization test's ``iterations`` and ``seed``, the ``test`` whose p-value decides, and the
    ``correction`` for the several runs compared with one baseline."""

    alpha: float = 0.05
    iterations: int = DEFAULT_ITERATIONS
    seed: int = 0
    test: TestName = "t"
    correction: Correction = "none"

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be at least 1, got {self.iterations}")
        if self.test not in TESTS:
            raise ValueError(f"test: {self.test!r} is not one of {', '.join(TESTS)}")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"correction: {self.correction!r} is not one of {', '.join(CORRECTIONS)}")


@dataclass(frozen=True)
class Row:
    """One measure and run: the baseline's row has ``n`` and ``mean`` only; a compared run's row adds the
    baseline's value over the same queries, the difference and the tests (None where undefined, with the
    reason in ``note``)."""

    measure: Measure
    run: str
    n: int
    mean: float | None
    baseline: bool = False
    baseline_mean: float | None = None
    difference: float | None = None
    relative: float | None = None  # difference / baseline_mean
    interval: tuple[float, float] | None = None
    t: float | None = None
    p_t: float | None = None
    p_randomization: float | None = None
    p_adjusted: float | None = None  # the chosen test's p, adjusted for the runs compared
    significant: bool | None = None
    note: str | None = None


@dataclass(frozen=True)
class RunComparison:
    """Every row, measure by measure (the baseline first), and which queries were compared."""

    baseline: str
    runs: tuple[str, ...]
    queries: int
    missing: dict[str, int]  # per run: queries evaluated in another run, not in this one
    settings: CompareSettings
    rows: list[Row] = field(default_factory=list)


def common_lists(batches: Sequence[RankedBatch]) -> list[list[int]]:
    """For each batch, the indices of its lists whose keys every batch has, in the first batch's order."""
    shared = set(batches[0].keys).intersection(*(set(b.keys) for b in batches[1:]))
    keys = [key for key in batches[0].keys if key in shared]
    positions = [{key: g for g, key in enumerate(batch.keys)} for batch in batches]
    return [[where[key] for key in keys] for where in positions]


def _mean(values: FloatArray) -> float | None:
    return float(values.mean()) if values.size else None


def _relative(difference: float | None, baseline: float | None) -> float | None:
    if difference is None or baseline is None or baseline == 0.0:
        return None
    return difference / baseline


def _compared_row(measure: Measure, run: str, test: TTest, p_randomization: float | None,
                  means: tuple[float | None, float | None]) -> Row:
    difference = test.mean
    return Row(measure, run, test.n, means[1], baseline_mean=means[0], difference=difference,
               relative=_relative(difference, means[0]), interval=test.interval, t=test.t, p_t=test.p,
               p_randomization=p_randomization, note=test.note)


def _mean_rows(measure: Measure, names: Sequence[str], batches: Sequence[RankedBatch],
               lists: Sequence[list[int]], settings: CompareSettings) -> list[Row]:
    columns = []
    for batch, chosen in zip(batches, lists, strict=True):
        values = measure_values(measure, batch)
        columns.append(np.array([np.nan if values[g] is None else values[g] for g in chosen],
                                dtype=np.float64))
    base = columns[0]
    defined = base[np.isfinite(base)]
    rows = [Row(measure, names[0], int(defined.size), _mean(defined), baseline=True)]
    for name, column in zip(names[1:], columns[1:], strict=True):
        both = np.isfinite(base) & np.isfinite(column)
        differences = column[both] - base[both]
        test = paired_t(differences, settings.alpha)
        p = randomization_p(differences, settings.iterations, settings.seed)
        rows.append(_compared_row(measure, name, test, p, (_mean(base[both]), _mean(column[both]))))
    return rows


def _ratio_rows(measure: Measure, pairs: PairRatio, names: Sequence[str], batches: Sequence[RankedBatch],
                lists: Sequence[list[int]], settings: CompareSettings) -> list[Row]:
    counts = [[pairs.counts(batch.judged_list(g)) for g in chosen] for batch, chosen in zip(batches, lists,
                                                                                           strict=True)]
    values = [pairs.ratio(measure, sum(run, PairCounts())) for run in counts]
    n = len(lists[0])
    rows = [Row(measure, names[0], n, values[0], baseline=True)]
    if pairs.parts is None:
        note = f"{measure.name} is a ratio of summed pair counts without parts: no paired test"
        return rows + [Row(measure, name, n, value, baseline_mean=values[0], note=note)
                       for name, value in zip(names[1:], values[1:], strict=True)]
    split = pairs.parts
    parts = [tuple(np.array([split(measure, c)[i] for c in run], dtype=np.float64) for i in (0, 1))
             for run in counts]
    base = (parts[0][0], parts[0][1])
    for name, value, run_parts in zip(names[1:], values[1:], parts[1:], strict=True):
        candidate = (run_parts[0], run_parts[1])
        test = paired_ratio_t(base, candidate, settings.alpha)
        p = ratio_randomization_p(base, candidate, settings.iterations, settings.seed)
        if test.mean is None and n:
            test = replace(test, note=f"{measure} is +Inf or undefined in one of the runs (no discordant "
                                      "pair): no difference to test")
        rows.append(_compared_row(measure, name, test, p, (values[0], value)))
    return rows


def _significance(rows: list[Row], settings: CompareSettings) -> list[Row]:
    """The compared rows of one measure with the chosen test's p adjusted and the significance marked."""
    compared = [row for row in rows if not row.baseline]
    chosen = [row.p_t if settings.test == "t" else row.p_randomization for row in compared]
    adjusted = iter(adjust(chosen, settings.correction))
    marked = []
    for row in rows:
        if row.baseline:
            marked.append(row)
            continue
        p = next(adjusted)
        marked.append(replace(row, p_adjusted=p, significant=None if p is None else p < settings.alpha))
    return marked


def compare_runs(measures: Iterable[Measure], runs: Mapping[str, RankedBatch],
                 settings: CompareSettings | None = None) -> RunComparison:
    """Each run of ``runs`` after the first compared with the first (the baseline), per measure."""
    settings = settings or CompareSettings()
    names, batches = list(runs), list(runs.values())
    if len(batches) < 2:
        raise ValueError("comparing runs needs a baseline and at least one other run")
    lists = common_lists(batches)
    rows: list[Row] = []
    for measure in dict.fromkeys(measures):
        pairs = lookup(measure.name).pairs
        if pairs is not None:
            measure_rows = _ratio_rows(measure, pairs, names, batches, lists, settings)
        else:
            measure_rows = _mean_rows(measure, names, batches, lists, settings)
        rows.extend(_significance(measure_rows, settings))
    every = set().union(*(batch.keys for batch in batches))
    missing = {name: len(every) - batch.n_lists for name, batch in zip(names, batches, strict=True)}
    return RunComparison(names[0], tuple(names), len(lists[0]), missing, settings, rows)
