"""Pairwise list metrics: PNR pair counts (seed 000, 正逆序比) and the Kendall tau distance (seed 003).

For every pair of documents in one list, ordered by model score (higher first):

* ``score_tied``: equal scores, so the model expressed no order (left out of PNR);
* ``grade_tied``: different scores, equal grades;
* ``concordant``: the higher-scored document has the higher grade;
* ``discordant``: the higher-scored document has the lower grade (逆序对).

PNR under the ties-positive convention (``ties="positive"``, the source notes'; older spelling ``"seed"``)
counts grade-tied pairs as positive: (concordant + grade_tied) / discordant; under the "skip" convention
(Paddle's pair evaluator) they are left out: concordant / discordant. No discordant pair gives +inf (no
positive pair either gives None: no data). Aggregate PNR is the ratio of summed counts, never the mean of
per-list ratios, so :class:`PairCounts` merges with ``+``.

>>> c = pair_counts([3, 2, 3, 3, 2, 1], [6, 5, 4, 3, 2, 1])
>>> c.positive("positive"), c.discordant, c.pnr("positive"), c.pnr("skip")
(13, 2, 6.5, 4.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from monitor.core.metrics._arrays import ArrayLike, as_floats

TieConvention = Literal["positive", "skip"]
TIE_CONVENTIONS: tuple[TieConvention, ...] = ("positive", "skip")
#: Older spellings still accepted: "seed" (the source notes' convention) is "positive".
TIE_ALIASES: dict[str, TieConvention] = {"seed": "positive"}


def tie_convention(name: str) -> TieConvention:
    """The convention ``name`` denotes (an alias too); ValueError naming the accepted ones otherwise.

    >>> tie_convention("seed"), tie_convention("skip")
    ('positive', 'skip')
    """
    if name in TIE_CONVENTIONS:
        return name
    if name in TIE_ALIASES:
        return TIE_ALIASES[name]
    raise ValueError(f"unknown tie convention {name!r}; accepted: {', '.join(TIE_CONVENTIONS)} "
                     f"(or {', '.join(TIE_ALIASES)})")


@dataclass(frozen=True, slots=True)
class PairCounts:
    """The four pair counts of one or many lists; a mergeable aggregate (``a + b``)."""

    concordant: int = 0
    discordant: int = 0
    grade_tied: int = 0
    score_tied: int = 0

    def __add__(self, other: PairCounts) -> PairCounts:
        return PairCounts(
            self.concordant + other.concordant,
            self.discordant + other.discordant,
            self.grade_tied + other.grade_tied,
            self.score_tied + other.score_tied,
        )

    def __sub__(self, other: PairCounts) -> PairCounts:
        """Take back ``other``'s counts, added before (the inverse of ``+``)."""
        return PairCounts(
            self.concordant - other.concordant,
            self.discordant - other.discordant,
            self.grade_tied - other.grade_tied,
            self.score_tied - other.score_tied,
        )

    @property
    def pairs(self) -> int:
        return self.concordant + self.discordant + self.grade_tied + self.score_tied

    def positive(self, ties: str = "positive") -> int:
        """The pairs counted for the ranking: ``positive`` (grade-tied pairs count as positive, the source
        notes' convention; alias ``seed``) adds the grade-tied ones to the concordant, ``skip`` does not."""
        if tie_convention(ties) == "positive":
            return self.concordant + self.grade_tied
        return self.concordant

    def pnr(self, ties: str = "positive") -> float | None:
        """positive / discordant; +inf without discordant pairs; None when there is no pair to count."""
        positive = self.positive(ties)
        if self.discordant == 0:
            return math.inf if positive else None
        return positive / self.discordant


def pair_counts(grades: ArrayLike, scores: ArrayLike) -> PairCounts:
    """Count the pairs of one list (any order; pairs are oriented by score). O(n²) memory-light numpy."""
    y = as_floats(grades, "grades")
    s = as_floats(scores, "scores")
    if y.size != s.size:
        raise ValueError(f"grades and scores differ in length: {y.size} != {s.size}")
    if np.isnan(s).any() or np.isnan(y).any():
        raise ValueError("grades and scores must not be NaN")
    # comparisons, not differences: inf − inf would be NaN. Over the whole n × n matrix, not its upper
    # triangle: both signs flip with the order of a pair, so every pair is counted twice (and the diagonal,
    # a document against itself, once as score-tied), which is cheaper than indexing the triangle
    ds = np.greater(s[:, None], s[None, :]).astype(np.int8) - np.less(s[:, None], s[None, :])
    dy = np.greater(y[:, None], y[None, :]).astype(np.int8) - np.less(y[:, None], y[None, :])
    ordered = ds != 0
    product = ds * dy
    return PairCounts(
        concordant=int(np.count_nonzero(ordered & (product > 0))) // 2,
        discordant=int(np.count_nonzero(ordered & (product < 0))) // 2,
        grade_tied=int(np.count_nonzero(ordered & (dy == 0))) // 2,
        score_tied=(int(np.count_nonzero(~ordered)) - y.size) // 2,
    )


def kendall_tau_distance(grades: ArrayLike) -> int:
    """Discordant pairs between the shown order (grades in rank order) and the order by grade.

    >>> kendall_tau_distance([0, 1, 2])
    3
    """
    y = as_floats(grades, "grades")
    return pair_counts(y, -np.arange(y.size, dtype=np.float64)).discordant
