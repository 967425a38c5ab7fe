"""Merge tests of the mergeable aggregates, river-style (``river/stats/test_parallel.py``).

A stream split at random points into 2..5 parts and aggregated part by part, then merged, must give what
one aggregate fed the whole stream gives: counts exactly, float sums to 1e-9 relative. Merging is
commutative and associative in value, so per-worker partials and Redis hash increments combine in any
order. ``Mean`` agrees with ``statistics`` and with the hand formula of its confidence interval; an empty
aggregate has no value (None, not 0); aggregate PNR is the ratio of summed pair counts.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import operator
import statistics
from collections.abc import Sequence
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.aggregates import Z_95, Mean, PairAggregate
from monitor.core.evaluation import MeasureAggregate, compute, evaluate_lists, list_pair_counts
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.judged import JudgedList
from monitor.core.measures import parse_measure
from monitor.core.metrics import PairCounts, pair_counts
from tests.support import brute_force as bf

PROPERTY = settings(max_examples=200, deadline=None)

T = TypeVar("T")

values = st.floats(-1e3, 1e3, allow_nan=False)
streams = st.lists(values, max_size=200)
# Multiples of 1/8 below 2^10: every sum and sum of squares of up to 200 of them is exact in a double.
dyadic = st.integers(-8 * 1024, 8 * 1024).map(lambda i: i / 8)


@st.composite
def split(draw: st.DrawFn, items: st.SearchStrategy[list[T]]) -> tuple[list[T], list[list[T]]]:
    """A stream and its cut into 2..5 consecutive parts (parts may be empty)."""
    whole = draw(items)
    cuts = sorted(draw(st.lists(st.integers(0, len(whole)), min_size=1, max_size=4)))
    bounds = [0, *cuts, len(whole)]
    return whole, [whole[a:b] for a, b in itertools.pairwise(bounds)]


def assert_sums_close(got: float, want: float, scale: float) -> None:
    """1e-9 relative, with the absolute slack measured against Σ|x| (sums may cancel to ≈ 0)."""
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9 * scale), (got, want)


def assert_mean_equals_stream(mean: Mean, stream: Sequence[float]) -> None:
    single = Mean.of(stream)
    assert mean.n == single.n == len(stream)
    assert_sums_close(mean.total, single.total, sum(abs(x) for x in stream))
    assert_sums_close(mean.total_sq, single.total_sq, sum(x * x for x in stream))
    if stream:
        got = mean.get()
        assert got is not None
        assert math.isclose(got, statistics.fmean(stream), rel_tol=1e-9, abs_tol=1e-9 * max(map(abs, stream)))
    else:
        assert mean.get() is None


# ---------------------------------------------------------------- Mean: merge equals the whole stream


@PROPERTY
@given(split(streams))
def test_merging_the_parts_means_equals_the_whole_streams_mean(case: tuple[list[float], list[list[float]]]) -> None:
    whole, parts = case
    partials = [Mean.of(part) for part in parts]
    assert_mean_equals_stream(functools.reduce(operator.add, partials), whole)
    merged = Mean()
    for partial in partials:
        merged.merge(partial)
    assert_mean_equals_stream(merged, whole)


@PROPERTY
@given(split(streams), st.permutations(range(5)))
def test_merge_order_does_not_change_the_value(
    case: tuple[list[float], list[list[float]]], order: list[int]
) -> None:
    whole, parts = case
    partials = [Mean.of(part) for part in parts]
    shuffled = [partials[i] for i in order if i < len(partials)]
    assert_mean_equals_stream(functools.reduce(operator.add, shuffled), whole)


@PROPERTY
@given(streams, streams, streams)
def test_merge_is_commutative_and_associative(xs: list[float], ys: list[float], zs: list[float]) -> None:
    a, b, c = Mean.of(xs), Mean.of(ys), Mean.of(zs)
    assert a + b == b + a  # float addition is commutative: bit for bit
    left, right = (a + b) + c, a + (b + c)
    assert left.n == right.n
    assert_sums_close(left.total, right.total, sum(abs(x) for x in xs + ys + zs))
    assert_sums_close(left.total_sq, right.total_sq, sum(x * x for x in xs + ys + zs))


@PROPERTY
@given(streams, streams)
def test_merge_in_place_equals_plus_and_leaves_the_other_alone(xs: list[float], ys: list[float]) -> None:
    a, b = Mean.of(xs), Mean.of(ys)
    before = copy.copy(b)
    expected = a + b
    a.merge(b)
    assert a == expected
    assert b == before


@PROPERTY
@given(split(st.lists(dyadic, max_size=200)))
def test_merge_is_exact_when_the_sums_are(case: tuple[list[float], list[list[float]]]) -> None:
    whole, parts = case
    assert functools.reduce(operator.add, [Mean.of(p) for p in parts]) == Mean.of(whole)


# ---------------------------------------------------------------- Mean: revert with weight=-1


@PROPERTY
@given(st.lists(dyadic, max_size=200), dyadic)
def test_revert_restores_the_state_exactly(xs: list[float], x: float) -> None:
    mean = Mean.of(xs)
    before = copy.copy(mean)
    mean.update(x)
    mean.update(x, weight=-1)
    assert mean == before


@PROPERTY
@given(st.lists(dyadic, max_size=200))
def test_reverting_every_value_leaves_no_data(xs: list[float]) -> None:
    mean = Mean.of(xs)
    for x in reversed(xs):
        mean.update(x, weight=-1)
    assert mean == Mean()
    assert mean.get() is None


@PROPERTY
@given(streams, st.data())
def test_revert_from_a_merged_aggregate_equals_the_stream_without_that_value(
    xs: list[float], data: st.DataObject
) -> None:
    """For arbitrary floats the sums round, so the revert is exact in n and to 1e-9 in the sums."""
    whole = [*xs, data.draw(values)]
    index = data.draw(st.integers(0, len(whole) - 1))
    cut = data.draw(st.integers(0, len(whole)))
    merged = Mean.of(whole[:cut]) + Mean.of(whole[cut:])
    merged.update(whole[index], weight=-1)
    rest = whole[:index] + whole[index + 1 :]
    single = Mean.of(rest)
    assert merged.n == single.n
    assert_sums_close(merged.total, single.total, sum(abs(x) for x in whole))
    assert_sums_close(merged.total_sq, single.total_sq, sum(x * x for x in whole))


# ---------------------------------------------------------------- Mean: statistics and the interval


def test_z_95_is_the_normal_97_5_percent_quantile() -> None:
    assert math.isclose(Z_95, statistics.NormalDist().inv_cdf(0.975), rel_tol=1e-12)


@PROPERTY
@given(st.lists(st.floats(0.0, 50.0), min_size=2, max_size=200))
def test_mean_variance_and_interval_agree_with_statistics(xs: list[float]) -> None:
    """Metric-range values (DCG@40 stays below ~20). The sum-of-squares form loses digits to cancellation
    when the spread is tiny next to the mean, so the variance's slack is relative to the mean square."""
    mean = Mean.of(xs)
    n = len(xs)
    got_mean, got_var, interval = mean.get(), mean.variance(), mean.confidence_interval()
    assert got_mean is not None and got_var is not None and interval is not None
    assert math.isclose(got_mean, statistics.mean(xs), rel_tol=1e-12, abs_tol=1e-12)
    mean_square = sum(x * x for x in xs) / (n - 1)
    var_slack = 8 * n * 2.0**-52 * mean_square + 1e-300  # subnormal inputs: their squares underflow to 0
    want_var = statistics.variance(xs)
    assert got_var >= 0.0
    assert abs(got_var - want_var) <= var_slack + 1e-12 * want_var, (got_var, want_var)
    # the hand formula, from the aggregate's own mean and variance: mean ± z √(s²/n)
    low, high = interval
    half = Z_95 * math.sqrt(got_var / n)
    assert math.isclose(low, got_mean - half, rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(high, got_mean + half, rel_tol=1e-12, abs_tol=1e-12)
    # ... and against statistics: the squared half-width is z² s² / n
    assert low <= got_mean <= high
    assert abs(((high - low) / 2) ** 2 - Z_95**2 * want_var / n) <= Z_95**2 * (var_slack / n) + 1e-9


def test_mean_variance_and_interval_by_hand() -> None:
    mean = Mean.of([1.0, 2.0, 3.0, 6.0])
    assert mean.get() == 3.0
    assert mean.variance() == (4 + 1 + 0 + 9) / 3
    interval = mean.confidence_interval()
    assert interval is not None
    half = Z_95 * math.sqrt(14 / 3 / 4)
    assert interval == pytest.approx((3.0 - half, 3.0 + half), rel=1e-12)


# ---------------------------------------------------------------- no data is not zero


@pytest.mark.parametrize(
    "text", ["DCG@20", "nDCG@10", "AUC", "PNR", "PNR(ties=skip)", "AP", "AP@10", "RR", "ERR@20", "KendallTau"]
)
def test_empty_aggregates_have_no_value(text: str) -> None:
    assert MeasureAggregate(parse_measure(text)).get() is None
    empty = MeasureAggregate(parse_measure(text))
    empty.merge(MeasureAggregate(parse_measure(text)))
    assert empty.get() is None
    aggregate, per_list = evaluate_lists([parse_measure(text)], {})
    assert aggregate == {parse_measure(text): None}
    assert per_list == {}


def test_empty_mean_and_pair_aggregate_have_no_value() -> None:
    assert Mean().get() is None
    assert Mean().variance() is None and Mean().confidence_interval() is None
    one = Mean.of([0.0])
    assert one.get() == 0.0  # a zero is data
    assert one.variance() is None and one.confidence_interval() is None
    assert (Mean() + Mean()).get() is None
    assert PairAggregate().get("seed") is None and PairAggregate().get("skip") is None
    assert (PairAggregate() + PairAggregate()).get() is None


def test_undefined_per_list_values_are_left_out_not_counted_as_zero() -> None:
    """One-class lists have no AUC: the aggregate of lists that all lack one is None, and a one-class
    list next to a defined one leaves the mean at the defined value."""
    grades = FOUR_LEVEL_SCALE.grades
    one_class = JudgedList.build(["a", "b"], [2.0, 1.0], {"a": grades[3], "b": grades[2]}, 3)
    two_class = JudgedList.build(["a", "b"], [2.0, 1.0], {"a": grades[0], "b": grades[3]}, 3)
    auc = parse_measure("AUC")
    aggregate = MeasureAggregate(auc)
    aggregate.update(one_class)
    assert aggregate.get() is None
    aggregate.update(two_class)
    assert aggregate.get() == 0.0
    assert aggregate.mean.n == 1


# ---------------------------------------------------------------- judged lists: MeasureAggregate, PNR


@st.composite
def judged_lists(draw: st.DrawFn) -> JudgedList:
    """A seed-scale list of up to 20 documents, some unjudged, scores with ties, a few unshown labels."""
    n = draw(st.integers(0, 20))
    shown = draw(st.lists(st.none() | st.integers(0, 3), min_size=n, max_size=n))
    labels = {f"d{i}": FOUR_LEVEL_SCALE.grades[lv] for i, lv in enumerate(shown) if lv is not None}
    labels |= {f"u{i}": FOUR_LEVEL_SCALE.grades[lv] for i, lv in enumerate(draw(st.lists(st.integers(0, 3), max_size=3)))}
    scores = draw(st.none() | st.lists(st.integers(-3, 3).map(float), min_size=n, max_size=n))
    return JudgedList.build([f"d{i}" for i in range(n)], scores, labels, 3)


MEASURES = ["DCG@20", "nDCG@10", "AUC", "PNR", "PNR(ties=skip)", "AP", "AP@5", "RR", "ERR(p=0.9)@20", "P@5"]


def aggregate_of(text: str, lists: Sequence[JudgedList]) -> MeasureAggregate:
    aggregate = MeasureAggregate(parse_measure(text))
    for judged in lists:
        aggregate.update(judged)
    return aggregate


@PROPERTY
@given(split(st.lists(judged_lists(), max_size=30)), st.sampled_from(MEASURES))
def test_merging_measure_aggregates_equals_the_whole_stream(
    case: tuple[list[JudgedList], list[list[JudgedList]]], text: str
) -> None:
    whole, parts = case
    merged = aggregate_of(text, [])
    for part in parts:
        merged.merge(aggregate_of(text, part))
    single = aggregate_of(text, whole)
    assert merged.pairs == single.pairs  # integer counts: exact
    assert merged.mean.n == single.mean.n
    assert_sums_close(merged.mean.total, single.mean.total, abs(single.mean.total) + 1.0)
    got, want = merged.get(), single.get()
    if want is None or math.isinf(want):
        assert got == want
    else:
        assert got is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    # and the aggregate is the mean of the defined per-list values (PNR: the ratio of summed counts)
    measure = parse_measure(text)
    if measure.name != "PNR":
        defined = [v for v in (compute(measure, j) for j in whole) if v is not None]
        assert single.mean.n == len(defined)
        if defined:
            assert want is not None and math.isclose(want, statistics.fmean(defined), rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.slow
@PROPERTY
@given(split(st.lists(judged_lists(), max_size=30)))
def test_merging_pair_aggregates_equals_the_whole_stream(case: tuple[list[JudgedList], list[list[JudgedList]]]) -> None:
    whole, parts = case
    partials = []
    for part in parts:
        partial = PairAggregate()
        for judged in part:
            partial.update(list_pair_counts(judged))
        partials.append(partial)
    single = PairAggregate()
    for judged in whole:
        single.update(list_pair_counts(judged))
    assert functools.reduce(operator.add, partials) == single
    assert functools.reduce(operator.add, reversed(partials)) == single
    in_place = PairAggregate()
    for partial in partials:
        in_place.merge(partial)
    assert in_place == single
    assert single.lists == len(whole)


@pytest.mark.slow
@PROPERTY
@given(st.lists(judged_lists(), max_size=30))
def test_aggregate_pnr_is_the_ratio_of_summed_brute_force_counts(lists: list[JudgedList]) -> None:
    concordant = discordant = grade_tied = score_tied = 0
    for judged in lists:
        mask = judged.judged
        counts = bf.pair_counts(list(judged.levels[mask]), list(judged.scores[mask]))
        concordant += counts.concordant
        discordant += counts.discordant
        grade_tied += counts.grade_tied
        score_tied += counts.score_tied
    summed = bf.Pairs(concordant, discordant, grade_tied, score_tied)
    for ties in ("seed", "skip"):
        text = "PNR" if ties == "seed" else "PNR(ties=skip)"
        got, want = aggregate_of(text, lists).get(), bf.pnr(summed, ties)
        assert got == want or (got is not None and want is not None and math.isclose(got, want, rel_tol=1e-12))
        aggregate, _ = evaluate_lists([parse_measure(text)], {str(i): j for i, j in enumerate(lists)})
        assert aggregate[parse_measure(text)] == got


def test_aggregate_pnr_is_not_the_mean_of_per_list_ratios() -> None:
    """Two lists in score order: grades (低, 中, 无) have 2 concordant, 1 discordant (PNR 2); grades
    (无, 中, 低) have 1 concordant, 2 discordant (PNR 0.5). The mean of ratios is 1.25; the summed counts
    give 3 / 3 = 1."""
    g = FOUR_LEVEL_SCALE.grades
    first = JudgedList.build(["a", "b", "c"], [3.0, 2.0, 1.0], {"a": g[1], "b": g[2], "c": g[0]}, 3)
    second = JudgedList.build(["a", "b", "c"], [3.0, 2.0, 1.0], {"a": g[0], "b": g[2], "c": g[1]}, 3)
    pnr = parse_measure("PNR")
    aggregate, per_list = evaluate_lists([pnr], {"first": first, "second": second})
    assert per_list["first"][pnr] == 2.0 and per_list["second"][pnr] == 0.5
    assert aggregate[pnr] == 1.0
    assert statistics.mean([2.0, 0.5]) == 1.25 != aggregate[pnr]
    assert list_pair_counts(first) + list_pair_counts(second) == PairCounts(concordant=3, discordant=3)


def test_measure_aggregates_of_different_measures_do_not_merge() -> None:
    with pytest.raises(ValueError, match="cannot merge"):
        MeasureAggregate(parse_measure("DCG@10")).merge(MeasureAggregate(parse_measure("DCG@20")))


def test_pair_counts_merge_with_plus() -> None:
    a = pair_counts([3, 2, 3, 3, 2, 1], [6, 5, 4, 3, 2, 1])
    assert a + PairCounts() == a
    assert (a + a).pnr("seed") == a.pnr("seed")
