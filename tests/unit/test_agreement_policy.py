"""The disagreement policy, annotator labels and the rater tally (``monitor/core/agreement/``).

The grade chosen among raters is checked against a brute-force lower median written from its definition
(the smallest grade at or above which half the grades lie); the overlap share against its expected
frequency; the tally's merges in any partition against counting the union; its assessment table-driven.
"""

from __future__ import annotations

import functools
import operator
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.agreement.identity import OTHER, annotator_label, cap_annotators
from monitor.core.agreement.matrix import GradeMatrix
from monitor.core.agreement.policy import chosen_grade, gold_to_add, in_share, measured, needs_third
from monitor.core.agreement.tally import RaterTally, RaterThresholds, assess
from monitor.core.errors import MonitorError

PROPERTY = settings(max_examples=100, deadline=None)


@pytest.mark.parametrize(("grades", "max_gap", "third"), [
    ([3, 1], 1, True), ([3, 2], 1, False), ([0, 3], 1, True), ([1, 1], 1, False),
    ([2], 1, False), ([], 1, False), ([3, 0, 1], 1, False),  # never a fourth
    ([2, 1], 0, True), ([3, 1], 2, False),
])
def test_a_third_annotator_past_the_gap(grades: list[int], max_gap: int, third: bool) -> None:
    assert needs_third(grades, max_gap) is third


@pytest.mark.parametrize(("grades", "chosen"), [
    ([2], 2), ([3, 2], 2), ([2, 3], 2), ([3, 0, 1], 1), ([0, 3, 3], 3), ([3, 1, 0], 1), ([1, 1, 3, 3], 1),
])
def test_the_chosen_grade_is_the_lower_median(grades: list[int], chosen: int) -> None:
    assert chosen_grade(grades) == chosen


def lower_median(grades: list[int]) -> int:
    """The smallest given grade g with at least half of the grades ≤ g."""
    return min(g for g in grades if 2 * sum(1 for x in grades if x <= g) >= len(grades))


@PROPERTY
@given(st.lists(st.integers(0, 4), min_size=1, max_size=7), st.randoms(use_true_random=False))
def test_the_chosen_grade_ignores_arrival_order(grades: list[int], rng: random.Random) -> None:
    chosen = chosen_grade(grades)
    assert chosen == lower_median(grades) == chosen_grade(rng.sample(grades, len(grades)))
    assert chosen in grades


def test_agreement_is_measured_on_the_first_two_grades() -> None:
    assert measured([3, 0, 1]) == [3, 0] and measured([2]) == [2]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: chosen_grade([]), "no grade to choose from"),
    (lambda: needs_third([-1, 2]), "a grade's level is an integer ≥ 0, got -1"),
    (lambda: needs_third([1, 2], -1), "max_gap must be ≥ 0, got -1"),
    (lambda: in_share("k", 1.5, "overlap"), "share must be in [0, 1], got 1.5"),
    (lambda: gold_to_add(10, 0, 1.0), "gold share must be in [0, 1), got 1.0"),
    (lambda: gold_to_add(-1, 0, 0.1), "task counts must be ≥ 0"),
])
def test_policy_errors_name_the_bad_value(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MonitorError) as error:
        call()
    assert message in str(error.value)


def test_the_overlap_is_a_stable_share_of_pairs() -> None:
    keys = [f"query {q}|d-{q}-{n}" for q in range(400) for n in range(50)]
    overlap = [k for k in keys if in_share(k, 0.1, "overlap")]
    assert abs(len(overlap) / len(keys) - 0.1) < 0.006  # 20,000 keys: the binomial sd is 0.0021
    assert overlap == [k for k in keys if in_share(k, 0.1, "overlap")]  # the same in every run
    assert all(in_share(k, 0.2, "overlap") for k in overlap)  # a larger share keeps the smaller one's pairs
    other_salt = sum(in_share(k, 0.1, "gold") for k in overlap) / len(overlap)
    assert abs(other_salt - 0.1) < 0.03  # another salt picks independently


@pytest.mark.parametrize(("tasks", "gold", "share", "add"), [
    (95, 0, 0.05, 5), (95, 5, 0.05, 0), (96, 5, 0.05, 1), (0, 0, 0.05, 0), (90, 0, 0.1, 10), (9, 0, 0.0, 0),
    (10, 20, 0.1, 0),
])
def test_gold_tasks_to_add(tasks: int, gold: int, share: float, add: int) -> None:
    assert gold_to_add(tasks, gold, share) == add


@PROPERTY
@given(st.integers(0, 10_000), st.floats(0.0, 0.5))
def test_gold_to_add_reaches_the_share_and_no_more(tasks: int, share: float) -> None:
    gold = gold_to_add(tasks, 0, share)
    total = tasks + gold
    assert total == 0 or gold / total >= share - 1e-9
    assert gold == 0 or (gold - 1) / (total - 1) < share


def test_annotator_labels_are_stable_hashes() -> None:
    assert annotator_label(3) == annotator_label("3") == annotator_label(" 3 ") == "r-9e2519"  # pinned
    assert annotator_label("alice@example.com") == "r-fb8161"
    assert annotator_label(3, salt="s") == "r-767523"  # the salt keys the hash
    assert re.fullmatch(r"r-[0-9a-f]{6}", annotator_label("名字 with spaces"))
    with pytest.raises(MonitorError, match="an annotator id must not be empty"):
        annotator_label(" ")
    with pytest.raises(MonitorError, match="an annotator id is a string or an integer"):
        annotator_label(True)


def test_only_the_busiest_annotators_keep_a_label() -> None:
    volumes = {"7": 50, "8": 40, "9": 40, "10": 1}
    labels = cap_annotators(volumes, 2)
    assert labels == {"7": annotator_label("7"), "8": annotator_label("8"), "9": OTHER, "10": OTHER}
    assert set(cap_annotators(volumes, 0).values()) == {OTHER}
    assert all(v != k for k, v in cap_annotators(volumes, 10).items())


# ---- the tally -------------------------------------------------------------------------------------


def test_a_unit_of_three_raters_counts_every_pair() -> None:
    tally = RaterTally(4)
    tally.add_unit("head", {"a": 3, "b": 1, "c": 3})
    assert tally.peers["a"] == GradeMatrix.of_pairs(4, [(3, 1), (3, 3)])
    assert tally.peers["b"] == GradeMatrix.of_pairs(4, [(1, 3), (1, 3)])
    assert tally.buckets["head"].units == 1 and tally.buckets["head"].values == 3
    tally.add_unit("head", {"a": 2})  # one grade: nothing to agree on
    assert tally.buckets["head"].units == 1
    tally.take_back_unit("head", {"a": 3, "b": 1, "c": 3})
    assert tally == RaterTally(4)


units = st.lists(st.tuples(st.sampled_from(["head", "torso", "tail"]),
                           st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3), max_size=4)),
                 max_size=30)
golds = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 3), st.integers(0, 3)), max_size=20)


def tally_of(unit_list: list, gold_list: list) -> RaterTally:
    tally = RaterTally(4)
    for bucket, grades in unit_list:
        tally.add_unit(bucket, grades)
    for rater, known, answer in gold_list:
        tally.add_gold(rater, known, answer)
    return tally


@PROPERTY
@given(units, golds, st.integers(1, 4), st.randoms(use_true_random=False))
def test_tallies_merge_in_any_partition_and_order(unit_list: list, gold_list: list, parts: int,
                                                  rng: random.Random) -> None:
    pieces = [tally_of(unit_list[i::parts], gold_list[i::parts]) for i in range(parts)]
    rng.shuffle(pieces)
    whole = tally_of(unit_list, gold_list)
    merged = functools.reduce(operator.add, pieces, RaterTally(4))
    assert merged == whole
    merged.take_back(pieces[0])
    assert merged == functools.reduce(operator.add, pieces[1:], RaterTally(4))
    assert [f.value for f in assess(whole)] == [f.value for f in assess(tally_of(unit_list, gold_list))]


def test_merged_by_sums_annotators_under_one_label() -> None:
    tally = tally_of([("head", {"a": 3, "b": 3}), ("head", {"b": 1, "c": 0})], [("a", 2, 2), ("c", 1, 3)])
    merged = tally.merged_by({"a": "r-1", "b": OTHER, "c": OTHER})
    assert set(merged.peers) == {"r-1", OTHER} and merged.peers[OTHER].total == 3
    assert merged.gold[OTHER] == GradeMatrix.of_pairs(4, [(1, 3)])
    assert merged.overall() == tally.overall()
    with pytest.raises(MonitorError, match="annotator 'c' has no label"):
        tally.merged_by({"a": "r-1", "b": OTHER})


def test_assess_says_low_ok_or_inconclusive() -> None:
    thresholds = RaterThresholds(min_units=4, min_pairs=4, min_gold=3)
    tally = RaterTally(4)
    for level in (0, 1, 2, 3, 3):
        tally.add_unit("head", {"good": level, "fine": level})
        tally.add_unit("tail", {"fine": level, "bad": 3 - level})
    for known in (0, 1, 2, 3):
        tally.add_gold("good", known, known)
        tally.add_gold("bad", known, 0)
    found = {(f.key, f.measure): f for f in assess(tally, thresholds)}
    assert found["head", "alpha"].status == "ok" and found["head", "alpha"].value == 1.0
    assert found["tail", "alpha"].status == "low" and found["tail", "alpha"].count == 5
    assert found["all", "alpha"].count == 10
    assert found["good", "kappa"].status == "ok" and found["bad", "kappa"].status == "low"
    assert found["good", "gold_exact"].status == "ok" and found["bad", "gold_exact"].value == 0.25
    assert found["bad", "gold_exact"].status == "low"
    assert found["fine", "gold_exact"].status == "inconclusive" and found["fine", "gold_exact"].value is None
    few = assess(tally, RaterThresholds(min_units=50))
    assert {f.status for f in few if f.measure == "alpha"} == {"inconclusive"}
    assert [f.key for f in few if f.scope == "bucket"] == ["head", "tail", "all"]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: RaterTally(4).add_unit("", {"a": 1, "b": 1}), "a unit's bucket must not be empty"),
    (lambda: RaterTally(4).add_unit("head", {"a": 1, "b": 4}), "grade of 'b' 4 is not a level"),
    (lambda: RaterTally(4).merge(RaterTally(3)), "cannot combine tallies of 4 and 3 levels"),
    (lambda: RaterThresholds(annotator_kappa=-2), "annotator_kappa: must be in [-1, 1], got -2"),
    (lambda: RaterThresholds(gold_exact=1.2), "gold_exact: must be in [0, 1], got 1.2"),
    (lambda: RaterThresholds(min_gold=0), "min_gold: must be ≥ 1, got 0"),
])
def test_tally_errors_name_the_bad_value(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MonitorError) as error:
        call()
    assert message in str(error.value)
