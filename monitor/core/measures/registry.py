"""The measure as a value, what defines one, and the registry every measure module adds itself to.

A :class:`MeasureDefinition` is everything about one measure: its :class:`MeasureSpec` (name, cutoff
rule, parameters, summary), its per-list ``value``, how its aggregate over lists is formed (the mean of
the defined per-list values, or, with ``pairs``, a :class:`PairRatio`: the ratio of pair counts summed
over the lists) and, optionally, a vectorised ``batch`` value over a
:class:`~monitor.core.ranked_batch.RankedBatch` (without one, the batch path computes list by list).
:func:`register` adds a definition under its name and aliases; :func:`lookup` finds it again. The
provider (``monitor/core/evaluation.py``) and the batch path (``monitor/core/batch.py``) only look
definitions up: they know no measure by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.core.errors import MeasureError
from monitor.core.judged import JudgedList
from monitor.core.metrics.pairs import PairCounts
from monitor.core.ranked_batch import RankedBatch

ParamValue = str | float
CutoffRule = Literal["optional", "required", "none"]
FloatArray = npt.NDArray[np.float64]


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
        definition = _DEFINITIONS.get(self.name)  # not lookup(): param() reads this for every list
        return (lookup(self.name) if definition is None else definition).spec

    def param(self, key: str) -> ParamValue:
        for name, value in self.params:
            if name == key:
                return value
        default = self.spec.params[key].default
        if default is None:
            raise MeasureError(f"{self} has no parameter {key!r}")
        return default


PerListValue = Callable[[Measure, JudgedList], float | None]
BatchValue = Callable[[Measure, RankedBatch], FloatArray]


@dataclass(frozen=True)
class PairRatio:
    """An aggregate formed as a ratio of pair counts summed over the lists, never the mean of per-list
    ratios (PNR). ``counts``: one list's pair counts; ``ratio``: the measure's value of (summed) counts,
    None where undefined. A list's own value is the ratio of its own counts (:meth:`value`). ``parts``:
    the (numerator, denominator) whose quotient ``ratio`` is, for the paired tests of ``monitor evaluate``
    comparing runs (:mod:`monitor.core.paired`); without it, those tests are left out."""

    counts: Callable[[JudgedList], PairCounts]
    ratio: Callable[[Measure, PairCounts], float | None]
    parts: Callable[[Measure, PairCounts], tuple[float, float]] | None = None

    def value(self, measure: Measure, judged: JudgedList) -> float | None:
        return self.ratio(measure, self.counts(judged))


@dataclass(frozen=True)
class MeasureDefinition:
    """One measure: what it is (``spec``), its value on one list, how its aggregate is formed (the mean
    of the defined per-list values, or ``pairs``), a vectorised value over a batch if it has one
    (``batch``: one float per list; a measure that may be undefined on a list has none) and the other
    names it is read by (``aliases``, any case)."""

    spec: MeasureSpec
    value: PerListValue
    batch: BatchValue | None = None
    pairs: PairRatio | None = None
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name


_DEFINITIONS: dict[str, MeasureDefinition] = {}  # in registration order: the order accepted_measures lists
_WORDS: dict[str, str] = {}  # casefolded name or alias → name


def register(definition: MeasureDefinition) -> MeasureDefinition:
    """Add ``definition`` under its name and aliases (matched case-insensitively); returns it, so a
    measure module can write ``DEFINITION = register(MeasureDefinition(...))``. A name or alias that is
    taken already, or that the grammar could not read, is a :class:`MeasureError`."""
    words = [definition.name.casefold(), *(alias.casefold() for alias in definition.aliases)]
    for word in words:
        if not word.isascii() or not word.isalpha():
            raise MeasureError(f"measure name or alias {word!r} must be ASCII letters only")
        if word in _WORDS:
            raise MeasureError(f"cannot register {definition.name}: {word!r} already names {_WORDS[word]}")
    _DEFINITIONS[definition.name] = definition
    _WORDS.update(dict.fromkeys(words, definition.name))
    return definition


def unregister(name: str) -> MeasureDefinition:
    """Take the measure ``name`` (its canonical name) out of the registry, with its aliases; returns its
    definition (for tests that register a measure of their own and must leave the registry as found)."""
    definition = _DEFINITIONS.pop(name, None)
    if definition is None:
        raise MeasureError(f"no measure {name!r} is registered")
    for word in [w for w, owner in _WORDS.items() if owner == name]:
        del _WORDS[word]
    return definition


def lookup(name: str) -> MeasureDefinition:
    """The definition of the measure ``name``: its canonical name, or any case of it or of an alias."""
    definition = _DEFINITIONS.get(name)
    if definition is None:
        canonical = _WORDS.get(name.casefold())
        if canonical is None:
            raise MeasureError(f"unknown measure {name!r}; accepted: {', '.join(_DEFINITIONS)}")
        definition = _DEFINITIONS[canonical]
    return definition


def canonical_name(word: str) -> str | None:
    """The canonical name ``word`` denotes (any case, or an alias), None if it names no measure."""
    return _WORDS.get(word.casefold())


def definitions() -> tuple[MeasureDefinition, ...]:
    """Every registered definition, in registration order."""
    return tuple(_DEFINITIONS.values())


class _SpecsView(Mapping[str, MeasureSpec]):
    """Name → spec of every registered measure, in registration order (read only, always current)."""

    def __getitem__(self, name: str) -> MeasureSpec:
        return _DEFINITIONS[name].spec

    def __iter__(self) -> Iterator[str]:
        return iter(_DEFINITIONS)

    def __len__(self) -> int:
        return len(_DEFINITIONS)

    def __repr__(self) -> str:
        return f"SPECS({', '.join(_DEFINITIONS)})"


class _AliasesView(Mapping[str, str]):
    """Alias (casefolded) → canonical name, of every registered measure (read only, always current)."""

    def _aliases(self) -> dict[str, str]:
        return {alias.casefold(): d.name for d in _DEFINITIONS.values() for alias in d.aliases}

    def __getitem__(self, alias: str) -> str:
        return self._aliases()[alias]

    def __iter__(self) -> Iterator[str]:
        return iter(self._aliases())

    def __len__(self) -> int:
        return len(self._aliases())

    def __repr__(self) -> str:
        return f"ALIASES({self._aliases()!r})"


SPECS: Mapping[str, MeasureSpec] = _SpecsView()
ALIASES: Mapping[str, str] = _AliasesView()
