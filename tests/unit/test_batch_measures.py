"""``evaluate_batch`` on many lists at once against ``compute`` on each list, to 1e-12.

The batch computes cutoff measures over the first k documents of each list (an n × k matrix) when that
is smaller than the lists, and over every row otherwise; AP and RR from the relevant rows only. Random
batches (0–12 lists of 0–40 documents, empty lists, unjudged documents, judged documents never shown,
cutoffs from 1 to past every list's end) take both ways, and every registered measure is checked, each
with every cutoff its rule allows and every combination of parameter values (:func:`registered`): a new
measure's batch value is checked here without a line of this file changing.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.batch import RankedBatch, evaluate_batch
from monitor.core.errors import MeasureError
from monitor.core.evaluation import compute, evaluate_lists
from monitor.core.grades import TrecScale
from monitor.core.judged import JudgedList
from monitor.core.measures import SPECS, Measure, MeasureSpec, parse_measure
from monitor.core.ranked_batch import head

SCALE = TrecScale()
GRADES = {str(level): SCALE.parse(str(level)) for level in range(4)}
NUMBERS = ("0.5", "0.8", "1")  # tried for every numeric parameter; those its range refuses are left out


def registered(spec: MeasureSpec, k: int) -> list[Measure]:
    """The measure of ``spec`` with each cutoff its rule allows (none, k) and every combination of
    parameter values: each accepted word, and each of :data:`NUMBERS` that the parameter takes."""
    cutoffs = {"optional": ["", f"@{k}"], "required": [f"@{k}"], "none": [""]}[spec.cutoff]
    values: list[list[str]] = []
    for key, param in spec.params.items():
        taken = []
        for text in [*param.accepted.split("|"), *NUMBERS]:
            try:
                param.parse(text)
            except MeasureError:
                continue
            taken.append(f"{key}={text}")
        values.append(taken)
    texts = [spec.name + (f"({','.join(combo)})" if combo else "") + cutoff
             for combo in itertools.product(*values) for cutoff in cutoffs]
    return list(dict.fromkeys(parse_measure(text) for text in texts))


def every_registered(k: int) -> list[Measure]:
    measures = [m for spec in SPECS.values() for m in registered(spec, k)]
    assert {m.name for m in measures} == set(SPECS)
    return measures


def assert_batch_equals_per_list(measures: Sequence[Measure], lists: Sequence[JudgedList]) -> None:
    """Per-list values of the batch equal :func:`compute` on each list to 1e-12, and aggregates equal
    :func:`evaluate_lists`' (the per-list path's)."""
    batch = RankedBatch.from_lists([f"q{i}" for i in range(len(lists))], lists, 3)
    aggregate, per_list = evaluate_batch(measures, batch)
    expected_aggregate, _ = evaluate_lists(measures, {f"q{i}": judged for i, judged in enumerate(lists)})
    for measure in measures:
        for g, judged in enumerate(lists):
            assert_close(per_list[measure][g], compute(measure, judged), (str(measure), g))
        assert_close(aggregate[measure], expected_aggregate[measure], (str(measure), "aggregate"), 1e-9)


def assert_close(got: float | None, expected: float | None, where: object, tolerance: float = 1e-12) -> None:
    if expected is None or got is None or np.isinf(expected):
        assert got == expected, where
    else:
        assert abs(got - expected) <= tolerance * max(1.0, abs(expected)), (where, got, expected)


@st.composite
def judged_lists(draw: st.DrawFn) -> JudgedList:
    size = draw(st.integers(0, 40))
    docs = [f"d{i}" for i in range(size + draw(st.integers(0, 5)))]  # some judged, never shown
    labels = {doc: GRADES[draw(st.sampled_from("0001123"))] for doc in docs if draw(st.booleans())}
    scores = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=size, max_size=size))
    return JudgedList.build(docs[:size], sorted(scores, reverse=True), labels, 3)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(judged_lists(), max_size=12), st.integers(1, 45))
def test_every_measure_equals_compute_on_each_list(lists: list[JudgedList], k: int) -> None:
    assert_batch_equals_per_list(every_registered(k), lists)


@pytest.mark.parametrize("seed", range(4))
def test_every_registered_measure_equals_compute_on_random_lists(seed: int) -> None:
    """The fast loop's version of the property above: seeded random batches, cutoffs short and long."""
    rng = random.Random(seed)
    lists = []
    for _ in range(rng.randrange(1, 25)):
        size = rng.choice([0, 1, 2, 5, 10, 30, 60])
        docs = [f"d{i}" for i in range(size + rng.randrange(6))]
        labels = {doc: GRADES[rng.choice("0001123")] for doc in docs if rng.random() < 0.6}
        scores = sorted((rng.choice([0.0, 0.5, 1.0, 2.0, rng.random()]) for _ in range(size)), reverse=True)
        lists.append(JudgedList.build(docs[:size], scores, labels, 3))
    for k in (1, 3, 10, 100):
        assert_batch_equals_per_list(every_registered(k), lists)


def test_every_parameter_combination_is_generated() -> None:
    names = {str(m) for m in every_registered(5)}
    assert {"DCG(discount=jk,gain=exp)@5", "nDCG", "RBP(p=0.5)@5", "RBP(p=0.8)", "ERR(p=0.5)", "ERR@5",
            "P@5", "PNR", "PNR(ties=skip)", "AUC", "KendallTau"} <= names
    assert not any(m.startswith("RBP(p=1") for m in names) and "P" not in names and "AUC@5" not in names


def test_the_head_matrix_is_used_only_when_smaller_than_the_lists() -> None:
    offsets = np.array([0, 3, 3, 103], dtype=np.int64)
    rows, exists = head(offsets, 10) or (np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=bool))
    assert rows.shape == (3, 10)
    assert exists.sum(axis=1).tolist() == [3, 0, 10]
    assert rows[2, :3].tolist() == [3, 4, 5]
    assert head(offsets, 40) is None  # 3 × 40 > 103 rows
