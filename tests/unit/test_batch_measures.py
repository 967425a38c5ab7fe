"""``evaluate_batch`` on many lists at once against ``compute`` on each list, to 1e-12.

The batch computes cutoff measures over the first k documents of each list (an n × k matrix) when that
is smaller than the lists, and over every row otherwise; AP and RR from the relevant rows only. Random
batches (0–12 lists of 0–40 documents, empty lists, unjudged documents, judged documents never shown,
cutoffs from 1 to past every list's end) take both ways, and every measure kind is checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.batch import RankedBatch, _head, evaluate_batch
from monitor.core.evaluation import compute
from monitor.core.grades import TrecScale
from monitor.core.judged import JudgedList
from monitor.core.measures import parse_measure

SCALE = TrecScale()
GRADES = {str(level): SCALE.parse(str(level)) for level in range(4)}
BASE = ["nDCG", "AP", "RR", "RBP(p=0.8)", "AUC", "PNR", "KendallTau"]
WITH_CUTOFF = ["nDCG@{k}", "DCG@{k}", "DCG(gain=exp)@{k}", "DCG(discount=jk)@{k}", "CG@{k}", "P@{k}",
               "R@{k}", "AP@{k}", "RR@{k}", "RBP(p=0.5)@{k}", "ERR@{k}"]


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
    batch = RankedBatch.from_lists([f"q{i}" for i in range(len(lists))], lists, 3)
    measures = [parse_measure(m) for m in BASE + [m.format(k=k) for m in WITH_CUTOFF]]
    _, per_list = evaluate_batch(measures, batch)
    for measure in measures:
        for g, judged in enumerate(lists):
            expected, got = compute(measure, judged), per_list[measure][g]
            if expected is None or got is None or np.isinf(expected):
                assert got == expected, (str(measure), g)
            else:
                assert abs(got - expected) <= 1e-12, (str(measure), g, got, expected)


def test_the_head_matrix_is_used_only_when_smaller_than_the_lists() -> None:
    offsets = np.array([0, 3, 3, 103], dtype=np.int64)
    rows, exists = _head(offsets, 10) or (np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=bool))
    assert rows.shape == (3, 10)
    assert exists.sum(axis=1).tolist() == [3, 0, 10]
    assert rows[2, :3].tolist() == [3, 4, 5]
    assert _head(offsets, 40) is None  # 3 × 40 > 103 rows
