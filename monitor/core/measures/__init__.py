"""Measures as values, in the spirit of ir_measures: ``nDCG@10``, ``RBP(p=0.8)``, ``PNR(ties=skip)``.

A :class:`Measure` is immutable and hashable and prints as its canonical string, which :func:`parse_measure`
reads back, so one name serves as a CLI argument, a dict key, a Prometheus label value and a Redis key part.

Grammar: ``NAME [ "(" key=value {"," key=value} ")" ] [ "@" k ]``. Parameters equal to their default are
left out of the canonical form; names are matched case-insensitively and through a few aliases (MAP, MRR).

>>> str(parse_measure("ndcg@10")), str(parse_measure("RBP(p=0.80)")), str(parse_measure("DCG(gain=exp)@20"))
('nDCG@10', 'RBP(p=0.8)', 'DCG(gain=exp)@20')
>>> parse_measure("P@5") == parse_measure("p@5")
True

One module per measure (``cg.py``, ``dcg.py``, ``ndcg.py``, ``precision.py``, ``recall.py``, ``ap.py``,
``rr.py``, ``rbp.py``, ``err.py``, ``auc.py``, ``pnr.py``, ``kendall_tau.py``) holds everything about it:
its spec, its value on one list, how its aggregate is formed, its vectorised value over a batch if it has
one, and the :func:`register` call that adds it (``registry.py``). Importing this package imports them
all, in the order :func:`accepted_measures` lists them. To add a measure, add a module that registers a
:class:`MeasureDefinition` and import it below; ``tests/unit/test_measure_registry.py`` shows one.
"""

from __future__ import annotations

from monitor.core.measures.grammar import accepted_measures, parse_measure
from monitor.core.measures.registry import (
    ALIASES,
    SPECS,
    CutoffRule,
    Measure,
    MeasureDefinition,
    MeasureSpec,
    PairRatio,
    ParamSpec,
    ParamValue,
    definitions,
    lookup,
    register,
    unregister,
)

# isort: off
# The measures, each registered as its module is imported: this order is accepted_measures()'s.
from monitor.core.measures import cg, dcg, ndcg, precision, recall, ap, rr, rbp, err, auc, pnr, kendall_tau
# isort: on

MEASURE_MODULES = (cg, dcg, ndcg, precision, recall, ap, rr, rbp, err, auc, pnr, kendall_tau)

__all__ = [
    "ALIASES",
    "MEASURE_MODULES",
    "SPECS",
    "CutoffRule",
    "Measure",
    "MeasureDefinition",
    "MeasureSpec",
    "PairRatio",
    "ParamSpec",
    "ParamValue",
    "accepted_measures",
    "definitions",
    "lookup",
    "parse_measure",
    "register",
    "unregister",
]
