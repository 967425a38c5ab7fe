"""KendallTau: the Kendall tau distance, the number of discordant pairs between the shown order of the
judged documents and their grade order (seed 003; ``monitor/core/metrics/pairs.py``). No batch value."""

from __future__ import annotations

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.pairs import kendall_tau_distance


def value(measure: Measure, judged: JudgedList) -> float:
    return float(kendall_tau_distance(judged.levels[judged.judged]))


DEFINITION = register(MeasureDefinition(
    MeasureSpec("KendallTau", "none", {}, "Kendall tau distance (discordant pairs)"), value,
    aliases=("kendall",)))
