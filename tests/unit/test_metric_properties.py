"""Property tests of the per-list metrics and of ``evaluation.compute`` against a brute-force reference.

Every metric in ``monitor.core.metrics`` is checked on random lists (lengths 0..60; gains from the seed
scale {0, .3, .7, 1} or integers 0..4; scores with deliberate ties; cutoffs 1..70 or None) against
``brute_force``, which enumerates positions and pairs with plain loops straight from MISSION.md's table.
Floats must agree to 1e-12; +inf and None (no data) must agree exactly. Then the invariants the
definitions imply (nDCG in [0, 1], ideal DCG is the best order, pair counts cover every pair, ...), and
``compute`` for every measure kind on ``JudgedList.build`` inputs with unjudged documents and labelled
documents that were never shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.evaluation import compute
from monitor.core.grades import FOUR_LEVEL_SCALE, Grade, TrecScale
from monitor.core.judged import JudgedList
from monitor.core.measures import Measure, parse_measure
from monitor.core.metrics import (
    auc,
    average_precision,
    cg,
    dcg,
    err,
    ideal_dcg,
    kendall_tau_distance,
    ndcg,
    pair_counts,
    precision,
    rbp,
    recall,
    reciprocal_rank,
    seed_average_precision,
)
from tests.support import brute_force as bf

PROPERTY = settings(max_examples=200, deadline=None)

MAX_LENGTH = 60
SEED_GAINS = (0.0, 0.3, 0.7, 1.0)
GAIN_KINDS = ("linear", "exponential")
DISCOUNTS = ("log2", "jk")


def assert_same(actual: float | None, expected: float | None) -> None:
    """Equal to 1e-12 (absolute and relative); None and ±inf only equal themselves."""
    if expected is None or actual is None:
        assert actual is None and expected is None, (actual, expected)
        return
    if math.isinf(expected) or math.isinf(actual):
        assert actual == expected, (actual, expected)
        return
    assert math.isclose(actual, expected, rel_tol=1e-12, abs_tol=1e-12), (actual, expected)


# ---------------------------------------------------------------- strategies

cutoffs = st.none() | st.integers(1, 70)
gain_lists = st.one_of(
    st.lists(st.sampled_from(SEED_GAINS), max_size=MAX_LENGTH),
    st.lists(st.integers(0, 4).map(float), max_size=MAX_LENGTH),
)
relevance_lists = st.lists(st.integers(0, 1), max_size=MAX_LENGTH)
persistence = st.sampled_from([0.5, 0.8, 0.95]) | st.floats(0.01, 0.99)
continuation = st.sampled_from([1.0, 0.9, 0.5]) | st.floats(0.01, 1.0)


def scores_of_length(n: int) -> st.SearchStrategy[list[float]]:
    """Scores with many ties (few distinct values), with a few (arbitrary floats) or with none."""
    return st.one_of(
        st.lists(st.integers(-3, 3).map(float), min_size=n, max_size=n),
        st.lists(st.sampled_from([-0.0, 0.0, 0.25, 1e-9, -1e9]), min_size=n, max_size=n),
        st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n),
        st.permutations([float(i) for i in range(n)]),
    )


@st.composite
def graded_scored(draw: st.DrawFn) -> tuple[list[float], list[float]]:
    """Aligned (grades, scores) of one list."""
    grades = draw(gain_lists)
    return grades, draw(scores_of_length(len(grades)))


@st.composite
def scored_relevance(draw: st.DrawFn) -> tuple[list[float], list[int]]:
    """Aligned (scores, 0/1 relevance) of one list."""
    relevant = draw(relevance_lists)
    return draw(scores_of_length(len(relevant))), relevant


# ---------------------------------------------------------------- the reference reproduces MISSION.md


def test_brute_force_reproduces_the_seeds_worked_examples() -> None:
    """The oracle itself must hold the table's examples before it may judge the core."""
    y = [1, 0.7, 0.3, 1, 0.7, 0.7, 0.3, 0, 0.7, 0]
    assert math.isclose(bf.cg(y, 4), 3.0)
    assert math.isclose(bf.cg(sorted(y, reverse=True), 4), 3.4)
    assert round(bf.dcg(y, 4), 4) == 2.0223
    assert round(bf.ideal_dcg(y, 4), 4) == 2.2824
    shown = [3, 2, 3, 0, 1, 2]
    assert round(bf.dcg(shown, 6), 3) == 6.861
    assert round(bf.ideal_dcg([*shown, 3, 0], 6), 3) == 8.384
    assert round(bf.ndcg(shown, [*shown, 3, 0], 6), 4) == 0.8184
    pairs = bf.pair_counts([3, 2, 3, 3, 2, 1], [6, 5, 4, 3, 2, 1])
    assert (pairs.concordant + pairs.grade_tied, pairs.discordant) == (13, 2)
    assert bf.pnr(pairs, "seed") == 13 / 2
    assert bf.pnr(pairs, "skip") == 9 / 2
    top5 = [1, 0, 1, 0, 1]  # 7 documents, relevant A, C, F, G; the top 5 holds A, C and G
    assert bf.precision(top5, 5) == 3 / 5
    assert bf.recall(top5, 5, n_relevant=4) == 3 / 4
    assert round(bf.seed_average_precision([1, 0, 1, 1, 0], 5), 4) == 0.8056
    assert round(bf.seed_average_precision([0, 1, 0, 1, 1], 5), 4) == 0.5333
    assert bf.ndcg([0.0, 0.0], [0.0], 2) == 0.0
    assert bf.auc([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0]) == 0.75
    assert bf.auc([1.0, 1.0], [1, 0]) == 0.5
    assert bf.auc([1.0, 2.0], [1, 1]) is None
    assert bf.kendall_tau_distance([0, 1, 2]) == 3
    assert bf.pnr(bf.Pairs(concordant=1), "seed") == math.inf
    assert bf.pnr(bf.Pairs(grade_tied=1), "skip") is None


# ---------------------------------------------------------------- per-list metrics against the reference


@PROPERTY
@given(gain_lists, cutoffs)
def test_cg_matches_brute_force(gains: list[float], k: int | None) -> None:
    assert_same(cg(gains, k), bf.cg(gains, k))


@PROPERTY
@given(gain_lists, cutoffs, st.sampled_from(GAIN_KINDS), st.sampled_from(DISCOUNTS))
def test_dcg_matches_brute_force(gains: list[float], k: int | None, gain: str, discount: str) -> None:
    assert_same(dcg(gains, k, gain, discount), bf.dcg(gains, k, gain, discount))  # type: ignore[arg-type]


@PROPERTY
@given(gain_lists, cutoffs, st.sampled_from(GAIN_KINDS), st.sampled_from(DISCOUNTS))
def test_ideal_dcg_matches_brute_force(pool: list[float], k: int | None, gain: str, discount: str) -> None:
    assert_same(ideal_dcg(pool, k, gain, discount), bf.ideal_dcg(pool, k, gain, discount))  # type: ignore[arg-type]


@PROPERTY
@given(
    gain_lists,
    st.none() | gain_lists,
    st.booleans(),
    cutoffs,
    st.sampled_from(GAIN_KINDS),
    st.sampled_from(DISCOUNTS),
)
def test_ndcg_matches_brute_force(
    gains: list[float], extra: list[float] | None, pool_holds_list: bool, k: int | None, gain: str,
    discount: str,
) -> None:
    """Pool: the list itself (None), an unrelated pool, or the list plus labelled documents never shown."""
    pool = None if extra is None else (gains + extra if pool_holds_list else extra)
    assert_same(
        ndcg(gains, pool, k, gain, discount),  # type: ignore[arg-type]
        bf.ndcg(gains, pool, k, gain, discount),
    )


@PROPERTY
@given(relevance_lists, st.integers(1, 70))
def test_precision_matches_brute_force(relevant: list[int], k: int) -> None:
    assert_same(precision(relevant, k), bf.precision(relevant, k))


@PROPERTY
@given(relevance_lists, cutoffs, st.integers(0, 10))
def test_recall_matches_brute_force(relevant: list[int], k: int | None, unretrieved: int) -> None:
    n_relevant = sum(relevant) + unretrieved
    assert_same(recall(relevant, k, n_relevant), bf.recall(relevant, k, n_relevant))


@PROPERTY
@given(relevance_lists, cutoffs, st.integers(0, 10))
def test_trec_average_precision_matches_brute_force(relevant: list[int], k: int | None, unretrieved: int) -> None:
    n_relevant = sum(relevant) + unretrieved
    assert_same(
        average_precision(relevant, n_relevant, k), bf.trec_average_precision(relevant, n_relevant, k)
    )


@PROPERTY
@given(relevance_lists, cutoffs)
def test_seed_average_precision_matches_brute_force(relevant: list[int], k: int | None) -> None:
    assert_same(seed_average_precision(relevant, k), bf.seed_average_precision(relevant, k))


@PROPERTY
@given(relevance_lists, cutoffs)
def test_reciprocal_rank_matches_brute_force(relevant: list[int], k: int | None) -> None:
    assert_same(reciprocal_rank(relevant, k), bf.reciprocal_rank(relevant, k))


@PROPERTY
@given(gain_lists, persistence, cutoffs)
def test_rbp_matches_brute_force(gains: list[float], p: float, k: int | None) -> None:
    assert_same(rbp(gains, p, k), bf.rbp(gains, p, k))


@st.composite
def err_cases(draw: st.DrawFn) -> tuple[list[int], int]:
    """Levels on a 0..max_level scale, with negative (TREC) levels that ERR clamps to 0."""
    max_level = draw(st.integers(1, 4))
    return draw(st.lists(st.integers(-2, max_level), max_size=MAX_LENGTH)), max_level


@PROPERTY
@given(err_cases(), cutoffs, continuation)
def test_err_matches_brute_force(case: tuple[list[int], int], k: int | None, p: float) -> None:
    levels, max_level = case
    assert_same(err(levels, max_level, k, p), bf.err(levels, max_level, k, p))


@PROPERTY
@given(scored_relevance())
def test_auc_matches_brute_force(case: tuple[list[float], list[int]]) -> None:
    scores, relevant = case
    assert_same(auc(scores, relevant), bf.auc(scores, relevant))


@PROPERTY
@given(graded_scored())
def test_pair_counts_match_brute_force(case: tuple[list[float], list[float]]) -> None:
    grades, scores = case
    got, want = pair_counts(grades, scores), bf.pair_counts(grades, scores)
    assert (got.concordant, got.discordant, got.grade_tied, got.score_tied) == (
        want.concordant, want.discordant, want.grade_tied, want.score_tied,
    )
    for ties in ("seed", "skip"):
        assert_same(got.pnr(ties), bf.pnr(want, ties))  # type: ignore[arg-type]


@PROPERTY
@given(gain_lists)
def test_kendall_tau_distance_matches_brute_force(grades: list[float]) -> None:
    assert kendall_tau_distance(grades) == bf.kendall_tau_distance(grades)


# ---------------------------------------------------------------- invariants the definitions imply


@PROPERTY
@given(gain_lists, gain_lists, st.randoms(use_true_random=False), cutoffs, st.sampled_from(GAIN_KINDS),
       st.sampled_from(DISCOUNTS))
def test_ndcg_is_within_0_and_1_when_the_pool_holds_the_lists_gains(
    gains: list[float], unshown: list[float], rng: object, k: int | None, gain: str, discount: str
) -> None:
    pool = gains + unshown
    rng.shuffle(pool)  # type: ignore[attr-defined]
    value = ndcg(gains, pool, k, gain, discount)  # type: ignore[arg-type]
    assert 0.0 <= value <= 1.0 + 1e-12


@PROPERTY
@given(gain_lists.flatmap(lambda g: st.tuples(st.just(g), st.permutations(g))), cutoffs,
       st.sampled_from(GAIN_KINDS), st.sampled_from(DISCOUNTS))
def test_ideal_order_has_the_largest_dcg(
    case: tuple[list[float], list[float]], k: int | None, gain: str, discount: str
) -> None:
    gains, shuffled = case
    best = ideal_dcg(gains, k, gain, discount)  # type: ignore[arg-type]
    assert best >= dcg(shuffled, k, gain, discount) - 1e-12  # type: ignore[arg-type]
    assert best == ideal_dcg(shuffled, k, gain, discount)  # type: ignore[arg-type]


@PROPERTY
@given(gain_lists, st.integers(1, 69), st.sampled_from(GAIN_KINDS), st.sampled_from(DISCOUNTS))
def test_dcg_never_decreases_with_a_deeper_cutoff(gains: list[float], k: int, gain: str, discount: str) -> None:
    """To 1e-12: numpy's dot sums in blocks, so a trailing 0 gain can move the last bit either way."""
    shallow, deep = dcg(gains, k, gain, discount), dcg(gains, k + 1, gain, discount)  # type: ignore[arg-type]
    assert shallow <= deep + 1e-12


@PROPERTY
@given(graded_scored())
def test_pair_counts_cover_every_pair_once(case: tuple[list[float], list[float]]) -> None:
    grades, scores = case
    counts = pair_counts(grades, scores)
    n = len(grades)
    assert counts.pairs == n * (n - 1) // 2
    assert min(counts.concordant, counts.discordant, counts.grade_tied, counts.score_tied) >= 0


@PROPERTY
@given(graded_scored(), st.randoms(use_true_random=False))
def test_pair_counts_do_not_depend_on_the_order_the_list_is_given_in(
    case: tuple[list[float], list[float]], rng: object
) -> None:
    grades, scores = case
    rows = list(zip(grades, scores, strict=True))
    rng.shuffle(rows)  # type: ignore[attr-defined]
    assert pair_counts([g for g, _ in rows], [s for _, s in rows]) == pair_counts(grades, scores)


@PROPERTY
@given(graded_scored())
def test_seed_pnr_is_at_least_skip_pnr(case: tuple[list[float], list[float]]) -> None:
    counts = pair_counts(*case)
    seed, skip = counts.pnr("seed"), counts.pnr("skip")
    if seed is None:
        assert skip is None
    elif skip is not None:
        assert seed >= skip


@PROPERTY
@given(scored_relevance())
def test_auc_of_negated_scores_is_the_complement(case: tuple[list[float], list[int]]) -> None:
    """Holds with score ties too: a tied pair counts ½ both ways."""
    scores, relevant = case
    forward, backward = auc(scores, relevant), auc([-s for s in scores], relevant)
    if forward is None or backward is None:
        assert forward is None and backward is None
        assert sum(relevant) in (0, len(relevant))
    else:
        assert 0.0 <= forward <= 1.0
        assert math.isclose(forward + backward, 1.0, rel_tol=1e-12, abs_tol=1e-12)


@PROPERTY
@given(gain_lists)
def test_kendall_tau_distance_is_0_in_grade_order_and_all_strict_pairs_reversed(grades: list[float]) -> None:
    strict_pairs = sum(1 for i in range(len(grades)) for j in range(i) if grades[i] != grades[j])
    assert kendall_tau_distance(sorted(grades, reverse=True)) == 0
    assert kendall_tau_distance(sorted(grades)) == strict_pairs


@PROPERTY
@given(st.lists(st.sampled_from(SEED_GAINS), max_size=MAX_LENGTH), persistence, err_cases(), cutoffs)
def test_cascade_metrics_are_probabilities(
    gains: list[float], p: float, case: tuple[list[int], int], k: int | None
) -> None:
    assert 0.0 <= rbp(gains, p, k) < 1.0
    levels, max_level = case
    assert 0.0 <= err(levels, max_level, k, p) <= 1.0 + 1e-12


# ---------------------------------------------------------------- evaluation.compute on JudgedList.build

FIXED_MEASURES = (
    "nDCG@10", "DCG(gain=exp)@5", "AP", "AP@10", "ERR(p=0.9)@20", "RBP(p=0.8)", "PNR(ties=skip)", "PNR",
    "AUC", "P@5", "R@10", "RR", "CG@4", "DCG@20", "DCG(discount=jk)@40", "nDCG(gain=exp,discount=jk)",
)


@dataclass(frozen=True)
class Case:
    """One shown list and its query's labels; gains and relevance are looked up in this test's own tables
    (``gain_table``, ``relevant_from``), never in the core's grade objects."""

    doc_ids: list[str]
    scores: list[float] | None
    labels: dict[str, Grade]
    levels: dict[str, int]  # the labelled level of every labelled document, shown or not
    gain_table: Callable[[int], float]
    relevant_from: int
    max_level: int

    def build(self) -> JudgedList:
        return JudgedList.build(self.doc_ids, self.scores, self.labels, self.max_level)


def _seed_gain(level: int) -> float:
    return SEED_GAINS[level]


def _trec_gain(level: int) -> float:
    return float(level)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Seed or TREC scale; shown documents judged or not; labelled documents never shown."""
    if draw(st.booleans()):
        max_level, gain_table, relevant_from = 3, _seed_gain, 2  # 高 and 中 are relevant
        grade_of: Callable[[int], Grade] = FOUR_LEVEL_SCALE.grades.__getitem__
    else:
        max_level, gain_table, relevant_from = 4, _trec_gain, 1
        grade_of = TrecScale().parse
    n = draw(st.integers(0, MAX_LENGTH))
    shown = draw(st.lists(st.none() | st.integers(0, max_level), min_size=n, max_size=n))
    unshown = draw(st.lists(st.integers(0, max_level), max_size=10))
    scores = draw(st.none() | scores_of_length(n))
    doc_ids = [f"d{i}" for i in range(n)]
    levels = {doc: level for doc, level in zip(doc_ids, shown, strict=True) if level is not None}
    levels |= {f"u{i}": level for i, level in enumerate(unshown)}
    labels = {doc: grade_of(level) for doc, level in levels.items()}
    return Case(doc_ids, scores, labels, levels, gain_table, relevant_from, max_level)


@st.composite
def measure_texts(draw: st.DrawFn) -> str:
    """A measure string of any kind, with random cutoffs and parameters."""
    k = draw(cutoffs)
    at = "" if k is None else f"@{k}"
    kind = draw(st.sampled_from(["CG", "DCG", "nDCG", "P", "R", "AP", "RR", "RBP", "ERR", "AUC", "PNR"]))
    if kind in {"DCG", "nDCG"}:
        gain, discount = draw(st.sampled_from(["linear", "exp"])), draw(st.sampled_from(DISCOUNTS))
        return f"{kind}(gain={gain},discount={discount}){at}"
    if kind in {"P", "R"}:
        return f"{kind}@{draw(st.integers(1, 70))}"
    if kind == "RBP":
        return f"RBP(p={draw(persistence)!r}){at}"
    if kind == "ERR":
        return f"ERR(p={draw(continuation)!r}){at}"
    if kind == "AUC":
        return "AUC"
    if kind == "PNR":
        return f"PNR(ties={draw(st.sampled_from(['seed', 'skip']))})"
    return kind + at


def expected(measure: Measure, case: Case) -> float | None:
    """The brute-force value: unjudged documents have gain, level and relevance 0 and take no part in
    pairwise measures or AUC; the ideal and n_relevant come from every labelled document."""
    shown_levels = [case.levels.get(doc) for doc in case.doc_ids]
    gains = [0.0 if lv is None else case.gain_table(lv) for lv in shown_levels]
    levels = [0 if lv is None else lv for lv in shown_levels]
    relevant = [int(lv is not None and lv >= case.relevant_from) for lv in shown_levels]
    pool = [case.gain_table(lv) for lv in case.levels.values()]
    n_relevant = sum(1 for lv in case.levels.values() if lv >= case.relevant_from)
    scores = case.scores if case.scores is not None else [-(i + 1.0) for i in range(len(case.doc_ids))]
    judged = [i for i, lv in enumerate(shown_levels) if lv is not None]
    params = dict(measure.params)
    k = measure.cutoff
    gain = "exponential" if params.get("gain", "linear") == "exp" else "linear"
    discount = str(params.get("discount", "log2"))
    name = measure.name
    if name == "CG":
        return bf.cg(gains, k)
    if name == "DCG":
        return bf.dcg(gains, k, gain, discount)
    if name == "nDCG":
        return bf.ndcg(gains, pool, k, gain, discount)
    if name == "P":
        assert k is not None
        return bf.precision(relevant, k)
    if name == "R":
        return bf.recall(relevant, k, n_relevant)
    if name == "AP":
        return bf.trec_average_precision(relevant, n_relevant) if k is None else bf.seed_average_precision(
            relevant, k
        )
    if name == "RR":
        return bf.reciprocal_rank(relevant, k)
    if name == "RBP":
        return bf.rbp(gains, float(params["p"]), k)
    if name == "ERR":
        return bf.err(levels, case.max_level, k, float(params.get("p", 1.0)))
    if name == "AUC":
        return bf.auc([scores[i] for i in judged], [relevant[i] for i in judged])
    if name == "PNR":
        counts = bf.pair_counts([levels[i] for i in judged], [scores[i] for i in judged])
        return bf.pnr(counts, str(params.get("ties", "seed")))
    if name == "KendallTau":
        return float(bf.kendall_tau_distance([levels[i] for i in judged]))
    raise AssertionError(f"no brute force for {measure}")


@pytest.mark.parametrize("text", FIXED_MEASURES)
def test_fixed_measure_strings_parse_to_the_kind_they_name(text: str) -> None:
    measure = parse_measure(text)
    assert str(parse_measure(str(measure))) == str(measure)
    assert text.startswith(measure.name)


@pytest.mark.slow
@PROPERTY
@given(cases())
def test_compute_matches_brute_force_for_the_listed_measures(case: Case) -> None:
    judged = case.build()
    for text in FIXED_MEASURES:
        measure = parse_measure(text)
        assert_same(compute(measure, judged), expected(measure, case))


@PROPERTY
@given(cases(), measure_texts())
def test_compute_matches_brute_force_for_any_measure(case: Case, text: str) -> None:
    measure = parse_measure(text)
    assert_same(compute(measure, case.build()), expected(measure, case))


@st.composite
def fully_judged_cases(draw: st.DrawFn) -> Case:
    case = draw(cases())
    levels = dict(case.levels)
    for doc in case.doc_ids:
        if doc not in levels:
            levels[doc] = draw(st.integers(0, case.max_level))
    grade_of = FOUR_LEVEL_SCALE.grades.__getitem__ if case.max_level == 3 else TrecScale().parse
    labels = {doc: grade_of(level) for doc, level in levels.items()}
    return Case(case.doc_ids, case.scores, labels, levels, case.gain_table, case.relevant_from, case.max_level)


@pytest.mark.slow
@PROPERTY
@given(fully_judged_cases())
def test_compute_kendall_tau_matches_brute_force_on_fully_judged_lists(case: Case) -> None:
    measure = parse_measure("KendallTau")
    assert_same(compute(measure, case.build()), expected(measure, case))


def test_compute_gives_none_not_zero_where_a_measure_is_undefined() -> None:
    """AUC of a one-class list and PNR of a list without an ordered pair have no value."""
    grades = FOUR_LEVEL_SCALE.grades
    one_class = JudgedList.build(["a", "b"], [2.0, 1.0], {"a": grades[3], "b": grades[2]}, 3)
    assert compute(parse_measure("AUC"), one_class) is None
    tied = JudgedList.build(["a", "b", "c"], [1.0, 1.0, 1.0], {"a": grades[3], "b": grades[0]}, 3)
    assert compute(parse_measure("PNR"), tied) is None
    nothing_labelled = JudgedList.build(["a", "b"], None, {}, 3)
    assert compute(parse_measure("nDCG@10"), nothing_labelled) == 0.0
    assert compute(parse_measure("AUC"), nothing_labelled) is None


def test_compute_uses_labelled_documents_that_were_never_shown() -> None:
    """The MISSION example: y = [3,2,3,0,1,2] shown, a 3 and a 0 labelled but not shown."""
    shown = [3, 2, 3, 0, 1, 2]
    scale = TrecScale()
    labels = {f"d{i}": scale.parse(g) for i, g in enumerate(shown)} | {"x": scale.parse(3), "z": scale.parse(0)}
    judged = JudgedList.build([f"d{i}" for i in range(6)], None, labels, 3)
    value = compute(parse_measure("nDCG@6"), judged)
    assert value is not None
    assert round(value, 4) == 0.8184
    assert np.isclose(value, bf.ndcg(shown, [*shown, 3, 0], 6), rtol=0, atol=1e-12)
    assert compute(parse_measure("R@6"), judged) == 5 / 6  # 5 of the 6 labelled relevant (grade ≥ 1) shown
