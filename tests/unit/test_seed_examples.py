"""The worked examples of the seeds (../shared/seeds, tabulated in MISSION.md) hold exactly."""

from __future__ import annotations

import math

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.metrics import (
    cg,
    dcg,
    ideal_dcg,
    ndcg,
    pair_counts,
    precision,
    recall,
    seed_average_precision,
)

SEED_Y = [1, 0.7, 0.3, 1, 0.7, 0.7, 0.3, 0, 0.7, 0]


def test_cg_at_4_and_its_best_order() -> None:
    assert cg(SEED_Y, 4) == pytest.approx(3.0, abs=1e-12)
    assert cg(sorted(SEED_Y, reverse=True), 4) == pytest.approx(3.4, abs=1e-12)


def test_dcg_at_4_and_ideal() -> None:
    assert round(dcg(SEED_Y, 4), 4) == 2.0223
    assert round(ideal_dcg(SEED_Y, 4), 4) == 2.2824
    # the seed prints them to two places
    assert round(dcg(SEED_Y, 4), 2) == 2.02 and round(ideal_dcg(SEED_Y, 4), 2) == 2.28


def test_dcg_terms_by_hand() -> None:
    expected = 1 / math.log2(2) + 0.7 / math.log2(3) + 0.3 / math.log2(4) + 1 / math.log2(5)
    assert dcg(SEED_Y, 4) == pytest.approx(expected, rel=1e-15)


def test_ndcg_with_ideal_from_all_labelled_documents() -> None:
    shown = [3, 2, 3, 0, 1, 2]
    unshown = [3, 0]  # labelled for the query but never shown
    assert round(dcg(shown, 6), 3) == 6.861
    assert round(ideal_dcg(shown + unshown, 6), 3) == 8.384
    assert round(ndcg(shown, shown + unshown, 6), 4) == 0.8184
    # the ideal of the shown documents alone would be wrong (and larger)
    assert ndcg(shown, shown, 6) > 0.9


def test_pnr_seed_lecture_example() -> None:
    grades = [FOUR_LEVEL_SCALE.parse(g).level for g in ["高", "中", "高", "高", "中", "低"]]
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]  # already in score order
    counts = pair_counts(grades, scores)
    assert counts.positive("seed") == 13 and counts.discordant == 2
    assert counts.pnr("seed") == 13 / 2
    # the industrial convention (Paddle's pair evaluator) skips equal-grade pairs: 9/2
    assert counts.concordant == 9 and counts.pnr("skip") == 9 / 2
    assert counts.grade_tied == 4 and counts.score_tied == 0


def test_precision_and_recall_at_5() -> None:
    docs = ["A", "B", "C", "D", "E", "F", "G"]
    relevant = {"A", "C", "F", "G"}
    ranking = ["A", "B", "C", "G", "D", "E", "F"]  # top 5 holds A, C, G
    assert set(docs) == set(ranking)
    flags = [1 if d in relevant else 0 for d in ranking]
    assert precision(flags, 5) == pytest.approx(3 / 5)
    assert recall(flags, 5, n_relevant=len(relevant)) == pytest.approx(3 / 4)


@pytest.mark.parametrize(("positions", "expected", "seed_print"), [
    ((1, 3, 4), 0.8056, 0.81),
    ((2, 4, 5), 0.5333, 0.53),
])
def test_seed_average_precision_at_5(positions: tuple[int, ...], expected: float, seed_print: float) -> None:
    flags = [1 if i in positions else 0 for i in range(1, 6)]
    assert round(seed_average_precision(flags, 5), 4) == expected
    assert round(seed_average_precision(flags, 5), 2) == seed_print


def test_ndcg_hides_poor_recall_that_dcg_shows() -> None:
    """Seed 000: only low-grade documents in ideal order have NDCG = 1, but the user saw nothing good."""
    low = FOUR_LEVEL_SCALE.gain("低")
    poor = [low] * 20
    good = [FOUR_LEVEL_SCALE.gain("高")] * 20
    assert ndcg(poor, poor, 20) == pytest.approx(1.0)
    assert dcg(poor, 20) < 0.31 * dcg(good, 20)
    assert dcg(poor, 20) == pytest.approx(0.3 * dcg(good, 20))


def test_binarisation_of_the_four_level_scale() -> None:
    assert [FOUR_LEVEL_SCALE.parse(g).relevant for g in "高中低无"] == [True, True, False, False]
    assert [FOUR_LEVEL_SCALE.gain(g) for g in "高中低无"] == [1.0, 0.7, 0.3, 0.0]
