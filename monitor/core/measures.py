"""Measures as values, in the spirit of ir_measures: ``nDCG@10``, ``RBP(p=0.8)``, ``PNR(ties=skip)``.

A :class:`Measure` is immutable and hashable and prints as its canonical string, which :func:`parse_measure`
reads back, so one name serves as a CLI argument, a dict key, a Prometheus label value and a Redis key part.

Grammar: ``NAME [ "(" key=value {"," key=value} ")" ] [ "@" k ]``. Parameters equal to their default are
left out of the canonical form; names are matched case-insensitively and through a few aliases (MAP, MRR).

>>> str(parse_measure("ndcg@10")), str(parse_measure("RBP(p=0.80)")), str(parse_measure("DCG(gain=exp)@20"))
('nDCG@10', 'RBP(p=0.8)', 'DCG(gain=exp)@20')
>>> parse_measure("P@5") == parse_measure("p@5")
True
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from monitor.core.errors import MeasureError
from monitor.core.metrics.pairs import TIE_ALIASES

ParamValue = str | float
CutoffRule = Literal["optional", "required", "none"]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: how to parse it, its default (None: required) and, for words, the accepted values."""

    parse: Callable[[str], ParamValue]
    default: ParamValue | None
    accepted: str


@dataclass(frozen=True)
class MeasureSpec:
    name: str
    cutoff: CutoffRule
    params: Mapping[str, ParamSpec]
    summary: str


def _choice(*words: str, aliases: Mapping[str, str] | None = None) -> Callable[[str], ParamValue]:
    """A parameter that is one of ``words``; ``aliases``: older spellings, taken as the word they name."""
    def parse(text: str) -> ParamValue:
        if aliases and text in aliases:
            return aliases[text]
        if text not in words:
            raise MeasureError(f"expected one of {', '.join(words)}, got {text!r}")
        return text

    return parse


def _probability(open_top: bool) -> Callable[[str], ParamValue]:
    def parse(text: str) -> ParamValue:
        try:
            value = float(text)
        except ValueError:
            raise MeasureError(f"expected a number, got {text!r}") from None
        ok = 0.0 < value < 1.0 if open_top else 0.0 < value <= 1.0
        if not ok or not math.isfinite(value):
            raise MeasureError(f"expected a number in (0, {'1)' if open_top else '1]'}, got {text!r}")
        return value

    return parse


_GAIN = {
    "gain": ParamSpec(_choice("linear", "exp"), "linear", "linear|exp"),
    "discount": ParamSpec(_choice("log2", "jk"), "log2", "log2|jk"),
}

SPECS: dict[str, MeasureSpec] = {
    spec.name: spec
    for spec in (
        MeasureSpec("CG", "optional", {}, "cumulative gain of the top k"),
        MeasureSpec("DCG", "optional", _GAIN, "discounted cumulative gain (online headline)"),
        MeasureSpec("nDCG", "optional", _GAIN, "DCG / ideal DCG from all labelled documents"),
        MeasureSpec("P", "required", {}, "precision at k"),
        MeasureSpec("R", "required", {}, "recall at k"),
        MeasureSpec("AP", "optional", {}, "average precision (trec_eval; AP@k is seed 003's)"),
        MeasureSpec("RR", "optional", {}, "reciprocal rank of the first relevant document"),
        MeasureSpec("RBP", "optional", {"p": ParamSpec(_probability(True), None, "0<p<1")},
                    "rank-biased precision"),
        MeasureSpec("ERR", "optional", {"p": ParamSpec(_probability(False), 1.0, "0<p<=1")},
                    "expected reciprocal rank"),
        MeasureSpec("AUC", "none", {}, "ROC AUC of scores vs binary relevance"),
        MeasureSpec("PNR", "none", {"ties": ParamSpec(_choice("positive", "skip", aliases=TIE_ALIASES),
                                                      "positive", "positive|skip")},
                    "positive / negative pair ratio in score order"),
        MeasureSpec("KendallTau", "none", {}, "Kendall tau distance (discordant pairs)"),
    )
}

ALIASES = {"map": "AP", "mrr": "RR", "ndcg": "nDCG", "precision": "P", "recall": "R", "kendall": "KendallTau"}
_LOOKUP = {name.casefold(): name for name in SPECS} | ALIASES

_SYNTAX = re.compile(r"^\s*([A-Za-z]+)\s*(?:\((.*)\))?\s*(?:@\s*(\S+))?\s*$")


def accepted_measures() -> str:
    parts = []
    for spec in SPECS.values():
        params = ",".join(f"{key}={p.accepted}" for key, p in spec.params.items())
        text = spec.name + (f"({params})" if params else "")
        text += {"optional": "[@k]", "required": "@k", "none": ""}[spec.cutoff]
        parts.append(text)
    return ", ".join(parts)


def _format_value(value: ParamValue) -> str:
    return repr(value) if isinstance(value, float) else value


@dataclass(frozen=True, order=True)
class Measure:
    """A measure: name, optional cutoff, and its non-default parameters as sorted (key, value) pairs."""

    name: str
    cutoff: int | None = None
    params: tuple[tuple[str, ParamValue], ...] = ()

    def __str__(self) -> str:
        text = self.name
        if self.params:
            text += "(" + ",".join(f"{k}={_format_value(v)}" for k, v in self.params) + ")"
        if self.cutoff is not None:
            text += f"@{self.cutoff}"
        return text

    @property
    def spec(self) -> MeasureSpec:
        return SPECS[self.name]

    def param(self, key: str) -> ParamValue:
        for name, value in self.params:
            if name == key:
                return value
        default = self.spec.params[key].default
        if default is None:
            raise MeasureError(f"{self} has no parameter {key!r}")
        return default


def parse_measure(text: str) -> Measure:
    """Parse a measure string; :class:`MeasureError` lists what is accepted."""
    match = _SYNTAX.match(text)
    name = _LOOKUP.get(match.group(1).casefold()) if match else None
    if match is None or name is None:
        raise MeasureError(f"unknown measure {text!r}; accepted: {accepted_measures()}")
    spec = SPECS[name]
    raw_params, raw_cutoff = match.group(2), match.group(3)
    cutoff: int | None = None
    if raw_cutoff is not None:
        if spec.cutoff == "none":
            raise MeasureError(f"measure {name} takes no cutoff, got {text!r}")
        if not raw_cutoff.isdigit() or int(raw_cutoff) < 1:
            raise MeasureError(f"cutoff of {text!r} must be a positive integer, got {raw_cutoff!r}")
        cutoff = int(raw_cutoff)
    elif spec.cutoff == "required":
        raise MeasureError(f"measure {name} needs a cutoff, e.g. {name}@10")
    params: dict[str, ParamValue] = {}
    for part in (raw_params or "").split(","):
        if not part.strip():
            continue
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in spec.params:
            accepted = ", ".join(f"{k}={p.accepted}" for k, p in spec.params.items()) or "none"
            raise MeasureError(f"bad parameter {part.strip()!r} in {text!r}; {name} accepts: {accepted}")
        if key in params:
            raise MeasureError(f"parameter {key!r} given twice in {text!r}")
        try:
            params[key] = spec.params[key].parse(value)
        except MeasureError as error:
            raise MeasureError(f"parameter {key} of {text!r}: {error}") from None
    for key, param in spec.params.items():
        if param.default is None and key not in params:
            raise MeasureError(f"measure {name} needs parameter {key}, e.g. {name}({key}=0.8)")
    kept = tuple(sorted((k, v) for k, v in params.items() if v != spec.params[k].default or
                        spec.params[k].default is None))
    return Measure(name, cutoff, kept)
