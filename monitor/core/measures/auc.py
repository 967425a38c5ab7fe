"""AUC: ROC AUC of the model's scores against binary relevance over the judged documents, ties ½;
undefined (None) for a list with one class (``monitor/core/metrics/auc.py``). No batch value: the batch
path goes list by list."""

from __future__ import annotations

from monitor.core.judged import JudgedList
from monitor.core.measures.registry import Measure, MeasureDefinition, MeasureSpec, register
from monitor.core.metrics.auc import auc


def value(measure: Measure, judged: JudgedList) -> float | None:
    return auc(judged.scores[judged.judged], judged.relevant[judged.judged])


DEFINITION = register(MeasureDefinition(
    MeasureSpec("AUC", "none", {}, "ROC AUC of scores vs binary relevance"), value))
