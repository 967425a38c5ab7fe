"""PNR: the positive / negative pair ratio of the judged documents in score order (seed 000, 正逆序比;
``monitor/core/metrics/pairs.py``): (concordant + grade-tied) / discordant under ``ties=positive`` (the
default; ``seed`` is its older spelling), concordant / discordant under ``ties=skip``.

Its aggregate over lists is the ratio of the pair counts summed over them (a :class:`PairRatio`), never
the mean of per-list ratios.
"""

from __future__ import annotations

from typing import cast

from monitor.core.judged import JudgedList
from monitor.core.measures.params import choice
from monitor.core.measures.registry import (
    Measure,
    MeasureDefinition,
    MeasureSpec,
    PairRatio,
    ParamSpec,
    register,
)
from monitor.core.metrics.pairs import TIE_ALIASES, PairCounts, TieConvention, pair_counts


def list_pair_counts(judged: JudgedList) -> PairCounts:
    """PNR pair counts over the labelled documents of the list, oriented by model score."""
    return pair_counts(judged.levels[judged.judged], judged.scores[judged.judged])


def ratio(measure: Measure, counts: PairCounts) -> float | None:
    return counts.pnr(cast(TieConvention, measure.param("ties")))


def parts(measure: Measure, counts: PairCounts) -> tuple[float, float]:
    """(positive pairs, discordant pairs): the ratio's numerator and denominator."""
    return float(counts.positive(cast(TieConvention, measure.param("ties")))), float(counts.discordant)


PAIRS = PairRatio(list_pair_counts, ratio, parts)

DEFINITION = register(MeasureDefinition(
    MeasureSpec("PNR", "none", {"ties": ParamSpec(choice("positive", "skip", aliases=TIE_ALIASES), "positive",
                                                  "positive|skip")},
                "positive / negative pair ratio in score order"),
    PAIRS.value, pairs=PAIRS))
