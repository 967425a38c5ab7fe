"""Regressions found by the property tests: each once failed."""

from __future__ import annotations

import math

from monitor.core.evaluation import compute
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.judged import JudgedList
from monitor.core.measures import parse_measure
from monitor.core.metrics import pair_counts


def test_equal_infinite_scores_are_a_score_tie() -> None:
    assert pair_counts([1, 0], [math.inf, math.inf]).score_tied == 1
    assert pair_counts([0, 0], [-math.inf, -math.inf]).score_tied == 1
    assert pair_counts([1, 0], [math.inf, 0.0]).concordant == 1


def test_kendall_tau_leaves_out_unjudged_documents() -> None:
    low = FOUR_LEVEL_SCALE.parse("低")
    judged = JudgedList.build(["a", "b"], None, {"b": low}, 3)  # "a" unjudged, shown first
    assert compute(parse_measure("KendallTau"), judged) == 0.0
    both = JudgedList.build(["a", "b"], None, {"a": FOUR_LEVEL_SCALE.parse("无"), "b": low}, 3)
    assert compute(parse_measure("KendallTau"), both) == 1.0
