"""Rater agreement (``monitor/core/agreement/``): published examples, brute force, merges, edge cases.

* Krippendorff's alpha against Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", p. 8
  (the reliability data of 4 observers and 12 units with missing values: nominal .743, ordinal .815,
  interval .849, ratio .797, n = 40, and its coincidence matrix), and against the 3-coder, 15-unit
  example of Wikipedia's "Krippendorff's alpha" (nominal 0.691358, interval 0.810845, as the
  ``krippendorff`` package's doctests give them); and against a pairwise brute force written without the
  coincidence matrix (``tests/support/agreement.py``) on random data with missing values.
* Cohen's kappa against hand-computed examples (Wikipedia's 2 × 2: 0.4; a 3 × 3 worked in exact fractions
  below) and against a brute force over items.
* Merging in any partition and order equals counting the union; taking back a unit is exact; perfect
  agreement gives 1; the order of units and of raters within a unit changes nothing; no pairs, one level
  used, one rater: no value (None).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.agreement.alpha import Coincidence, unit_pairs
from monitor.core.agreement.matrix import GradeMatrix
from monitor.core.errors import MonitorError
from tests.support.agreement import alpha_pairwise, kappa_items

PROPERTY = settings(max_examples=60, deadline=None)
METRICS = ("nominal", "ordinal", "interval", "ratio")

# Krippendorff (2011), p. 8: observers A–D (rows), units 1–12 (columns), values 1–5, None: missing.
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]
# Wikipedia, "Krippendorff's alpha", a computational example: 3 coders, 15 units, values 1–4.
WIKIPEDIA = [
    [None, None, None, None, None, 3, 4, 1, 2, 1, 1, 3, 3, None, 3],
    [1, None, 2, 1, 3, 3, 4, 3, None, None, None, None, None, None, None],
    [None, None, 2, 1, 3, 4, 4, None, 2, 1, 1, 3, 3, None, 4],
]


def as_units(rows: list[list[int | None]]) -> list[list[int | None]]:
    """Observers × units of values 1.. → units of levels 0.. (None kept)."""
    return [[None if row[u] is None else row[u] - 1 for row in rows] for u in range(len(rows[0]))]


@pytest.mark.parametrize(("metric", "published"), [
    ("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797),
])
def test_krippendorff_2011_worked_example(metric: str, published: float) -> None:
    units = as_units(KRIPPENDORFF_2011)
    coincidence = Coincidence.of_units(5, units)
    values = [1, 2, 3, 4, 5]  # the ratio metric needs the values, not the levels 0..4
    alpha = coincidence.alpha(metric, values)  # type: ignore[arg-type]
    assert alpha is not None and round(alpha, 3) == published
    assert alpha == pytest.approx(alpha_pairwise(units, metric, values), abs=1e-12)


def test_krippendorff_2011_coincidence_matrix() -> None:
    coincidence = Coincidence.of_units(5, as_units(KRIPPENDORFF_2011))
    third = 1 / 3
    assert coincidence.values == 40 and coincidence.units == 11  # unit 12 has one value: not pairable
    np.testing.assert_allclose(coincidence.matrix(), [
        [7, 4 * third, third, third, 0],
        [4 * third, 10, 4 * third, third, 0],
        [third, 4 * third, 8, third, 0],
        [third, third, third, 4, 0],
        [0, 0, 0, 0, 3],
    ], atol=1e-12)
    np.testing.assert_allclose(coincidence.matrix().sum(axis=1), [9, 13, 10, 5, 3])


@pytest.mark.parametrize(("metric", "published"), [("nominal", 0.691358), ("interval", 0.810845)])
def test_wikipedia_example(metric: str, published: float) -> None:
    alpha = Coincidence.of_units(4, as_units(WIKIPEDIA)).alpha(metric)  # type: ignore[arg-type]
    assert alpha is not None and round(alpha, 6) == published


units_strategy = st.integers(2, 5).flatmap(lambda levels: st.tuples(
    st.just(levels),
    st.lists(st.lists(st.one_of(st.none(), st.integers(0, levels - 1)), min_size=1, max_size=5),
             min_size=0, max_size=25)))


@PROPERTY
@given(units_strategy, st.sampled_from(METRICS))
def test_alpha_equals_the_pairwise_brute_force(data: tuple[int, list[list[int | None]]], metric: str) -> None:
    levels, units = data
    values = [1.0 + 2.0 * i for i in range(levels)] if metric == "ratio" else None
    got = Coincidence.of_units(levels, units).alpha(metric, values)  # type: ignore[arg-type]
    want = alpha_pairwise(units, metric, values)
    if want is None:
        assert got is None
    else:
        assert got is not None and got == pytest.approx(want, rel=1e-9, abs=1e-9)


def split(items: list, cuts: list[int]) -> list[list]:
    points = sorted({c % (len(items) + 1) for c in cuts})
    bounds = [0, *points, len(items)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


@PROPERTY
@given(units_strategy, st.lists(st.integers(0, 100), max_size=4), st.randoms(use_true_random=False))
def test_alpha_counts_merge_in_any_partition_and_order(data: tuple[int, list[list[int | None]]],
                                                       cuts: list[int], rng: random.Random) -> None:
    levels, units = data
    parts = [Coincidence.of_units(levels, part) for part in split(units, cuts)]
    rng.shuffle(parts)
    merged = functools.reduce(operator.add, parts, Coincidence(levels))
    whole = Coincidence.of_units(levels, units)
    assert merged == whole
    assert Coincidence.from_fields(levels, merged.fields()) == whole
    for metric in METRICS:
        a, b = merged.alpha(metric), whole.alpha(metric)  # type: ignore[arg-type]
        assert (a is None and b is None) or a == b


@PROPERTY
@given(units_strategy, st.randoms(use_true_random=False))
def test_alpha_ignores_the_order_of_units_and_of_raters(data: tuple[int, list[list[int | None]]],
                                                        rng: random.Random) -> None:
    levels, units = data
    shuffled = [rng.sample(unit, len(unit)) for unit in units]
    rng.shuffle(shuffled)
    assert Coincidence.of_units(levels, shuffled) == Coincidence.of_units(levels, units)


@PROPERTY
@given(units_strategy, st.integers(0, 24))
def test_taking_back_a_unit_is_exact(data: tuple[int, list[list[int | None]]], index: int) -> None:
    levels, units = data
    if not units:
        return
    unit = units[index % len(units)]
    counted = Coincidence.of_units(levels, units)
    counted.take_back_unit(unit)
    rest = units[: index % len(units)] + units[index % len(units) + 1:]
    assert counted == Coincidence.of_units(levels, rest)


@PROPERTY
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(2, 4)), min_size=2, max_size=20))
def test_perfect_agreement_gives_one(units: list[tuple[int, int]]) -> None:
    coincidence = Coincidence.of_units(4, [[level] * size for level, size in units])
    if len({level for level, _ in units}) < 2:
        assert all(coincidence.alpha(m) is None for m in METRICS)  # type: ignore[arg-type]
    else:
        assert all(coincidence.alpha(m) == 1.0 for m in METRICS)  # type: ignore[arg-type]


def test_alpha_edge_cases() -> None:
    assert Coincidence(4).alpha() is None  # no units
    assert Coincidence.of_units(4, [[2], [3], [None, 1]]).alpha() is None  # one rater per unit
    assert Coincidence.of_units(4, [[2, 2], [2, 2, 2]]).alpha() is None  # one level used: nothing to tell
    chance = Coincidence.of_units(2, [[0, 1], [1, 0]])
    assert chance.alpha("nominal") == pytest.approx(1 - 3 / 2)  # systematic disagreement: below 0
    assert unit_pairs(4, [1, 1, 3, None])[0] == 3


@pytest.mark.parametrize(("call", "message"), [
    (lambda: Coincidence(0), "levels must be an integer ≥ 1, got 0"),
    (lambda: Coincidence.of_units(4, [[0, 4]]), "grade 4 is not a level of the scale (0..3)"),
    (lambda: Coincidence.of_units(4, [[0, True]]), "grade True is not a level of the scale (0..3)"),
    (lambda: Coincidence(4).alpha("cardinal"), "unknown alpha metric 'cardinal'"),  # type: ignore[arg-type]
    (lambda: Coincidence(2).alpha("interval", [0.0]), "values must be 2 finite numbers"),
    (lambda: Coincidence(2).alpha("ratio", [-1.0, 1.0]), "the ratio metric needs values ≥ 0"),
    (lambda: Coincidence(4).merge(Coincidence(3)), "cannot combine coincidences of 4 and 3 levels"),
    (lambda: Coincidence.from_fields(4, {"1|0|0": 2}), "coincidence field '1|0|0' is not 'm|c|k'"),
    (lambda: Coincidence(4, {1: np.zeros((4, 4), dtype=np.int64)}), "a unit size is an integer ≥ 2"),
])
def test_coincidence_errors_name_the_bad_value(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MonitorError) as error:
        call()
    assert message in str(error.value)


# ---- Cohen's kappa ---------------------------------------------------------------------------------


def test_kappa_wikipedia_two_by_two() -> None:
    """Wikipedia, "Cohen's kappa": 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no: p_o = .7, p_e = .5, κ = .4."""
    matrix = GradeMatrix(np.array([[20, 5], [10, 15]]))
    kappa = matrix.kappa("nominal")
    assert kappa is not None and kappa == pytest.approx(0.4, abs=1e-12)
    assert matrix.kappa("linear") == pytest.approx(0.4) and matrix.kappa("quadratic") == pytest.approx(0.4)


def test_kappa_three_levels_by_hand() -> None:
    """Rows 3, 3, 2; columns 2, 3, 3; N = 8; the two disagreements are one step each.

    linear: Σwo = 2, Σwe = (3·(3·1 + 3·2) + 3·(2·1 + 3·1) + 2·(2·2 + 3·1)) / 8 = 56/8 = 7: κ = 1 − 2/7 = 5/7;
    quadratic: Σwe = (3·(3 + 12) + 3·(2 + 3) + 2·(8 + 3)) / 8 = 82/8: κ = 1 − 16/82 = 33/41;
    nominal: p_o = 6/8, p_e = (3·2 + 3·3 + 2·3)/64 = 21/64: κ = (48 − 21)/(64 − 21) = 27/43.
    """
    matrix = GradeMatrix(np.array([[2, 1, 0], [0, 2, 1], [0, 0, 2]]))
    assert matrix.kappa("linear") == pytest.approx(5 / 7, abs=1e-12)
    assert matrix.kappa("quadratic") == pytest.approx(33 / 41, abs=1e-12)
    assert matrix.kappa("nominal") == pytest.approx(27 / 43, abs=1e-12)
    assert matrix.exact_share() == 6 / 8 and matrix.within_share(1) == 1.0 and matrix.within_share(0) == 6 / 8


pairs_strategy = st.integers(2, 5).flatmap(lambda levels: st.tuples(
    st.just(levels), st.lists(st.tuples(st.integers(0, levels - 1), st.integers(0, levels - 1)), max_size=40)))


@PROPERTY
@given(pairs_strategy, st.sampled_from(("nominal", "linear", "quadratic")))
def test_kappa_equals_the_brute_force_over_items(data: tuple[int, list[tuple[int, int]]], weights: str) -> None:
    levels, pairs = data
    got = GradeMatrix.of_pairs(levels, pairs).kappa(weights)  # type: ignore[arg-type]
    want = kappa_items([a for a, _ in pairs], [b for _, b in pairs], weights)
    if want is None:
        assert got is None
    else:
        assert got is not None and got == pytest.approx(float(want), rel=1e-9, abs=1e-12)


@PROPERTY
@given(pairs_strategy, st.lists(st.integers(0, 100), max_size=4), st.randoms(use_true_random=False))
def test_kappa_counts_merge_and_ignore_the_order_of_items(data: tuple[int, list[tuple[int, int]]],
                                                          cuts: list[int], rng: random.Random) -> None:
    levels, pairs = data
    whole = GradeMatrix.of_pairs(levels, pairs)
    shuffled = rng.sample(pairs, len(pairs))
    parts = [GradeMatrix.of_pairs(levels, part) for part in split(shuffled, cuts)]
    merged = functools.reduce(operator.add, parts, GradeMatrix.empty(levels))
    assert merged == whole and GradeMatrix.from_fields(levels, merged.fields()) == whole
    assert merged - parts[0] == functools.reduce(operator.add, parts[1:], GradeMatrix.empty(levels))
    for weights in ("nominal", "linear", "quadratic"):
        k = whole.kappa(weights)  # type: ignore[arg-type]
        swapped = GradeMatrix(whole.counts.T).kappa(weights)  # type: ignore[arg-type]
        assert (k is None and swapped is None) or (k is not None and swapped == pytest.approx(k))


@PROPERTY
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_kappa_of_perfect_agreement_is_one(grades: list[int]) -> None:
    matrix = GradeMatrix.of_pairs(4, [(g, g) for g in grades])
    if len(set(grades)) < 2:
        assert matrix.kappa("quadratic") is None  # one level used by both: no variation to agree on
    else:
        assert matrix.kappa("quadratic") == 1.0 and matrix.kappa("nominal") == 1.0


def test_kappa_and_shares_of_nothing_are_none() -> None:
    empty = GradeMatrix.empty(4)
    assert empty.kappa() is None and empty.exact_share() is None and empty.within_share() is None
    assert GradeMatrix.of_pairs(1, [(0, 0)] * 3).kappa() is None  # a single category


def test_two_raters_alpha_and_kappa_agree_in_the_limit() -> None:
    """For two raters, alpha and quadratic kappa differ only in how they estimate chance (pooled vs each
    rater's marginals) and by n/(n − 1); with the same marginals and many units they meet."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 20_000)
    b = np.clip(a + rng.integers(-1, 2, a.size), 0, 3)
    b = np.where(rng.random(a.size) < 0.5, a, b)
    kappa = GradeMatrix.of_pairs(4, zip(a.tolist(), b.tolist(), strict=True)).kappa("quadratic")
    alpha = Coincidence.of_units(4, zip(a.tolist(), b.tolist(), strict=True)).alpha("interval")
    assert kappa is not None and alpha is not None and math.isclose(kappa, alpha, abs_tol=2e-3)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: GradeMatrix(np.zeros((2, 3), dtype=np.int64)), "a grade matrix is square"),
    (lambda: GradeMatrix(np.zeros((2, 2))), "a grade matrix holds integer counts"),
    (lambda: GradeMatrix.empty(2).add(0, 2), "grade 2 is not a level of the scale (0..1)"),
    (lambda: GradeMatrix.empty(2).kappa("cubic"), "unknown kappa weights 'cubic'"),  # type: ignore[arg-type]
    (lambda: GradeMatrix.empty(2).merge(GradeMatrix.empty(3)), "cannot combine grade matrices of 2 and 3"),
    (lambda: GradeMatrix.empty(2).within_share(-1), "steps must be ≥ 0, got -1"),
    (lambda: GradeMatrix.from_fields(2, {"1-1": 1}), "grade matrix field '1-1' is not 'row|column'"),
])
def test_matrix_errors_name_the_bad_value(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MonitorError) as error:
        call()
    assert message in str(error.value)


def test_fractions_reference_is_exact() -> None:
    """The brute force itself, on the 3 × 3 example: exactly 5/7 and 33/41."""
    a = [0, 0, 0, 1, 1, 1, 2, 2]
    b = [0, 0, 1, 1, 1, 2, 2, 2]
    assert kappa_items(a, b, "linear") == Fraction(5, 7)
    assert kappa_items(a, b, "quadratic") == Fraction(33, 41)
