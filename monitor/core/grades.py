"""Grade scales: how a relevance label (高/中/低/无, an English name, an integer) becomes numbers.

A grade has three numeric faces:

* ``gain``: the real number used by gain-based metrics (CG, DCG, NDCG, RBP). The seeds' default scale maps
  高/中/低/无 to 1 / 0.7 / 0.3 / 0 (seed 000, 王树森《相关性的评价指标》).
* ``level``: its integer rank on the ordered scale (无 = 0 … 高 = 3), used by ERR's
  R = (2^level − 1) / 2^max_level (Chapelle et al. 2009).
* ``relevant``: the binarisation for AUC, P@k, R@k, AP and RR: 高 and 中 are relevant, 低 and 无 are not.

>>> FOUR_LEVEL_SCALE.parse("中").gain
0.7
>>> FOUR_LEVEL_SCALE.parse("high").relevant, FOUR_LEVEL_SCALE.parse(1).name
(True, '低')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.core.errors import GradeError


@dataclass(frozen=True, slots=True)
class Grade:
    """One grade of a scale."""

    name: str
    level: int
    gain: float
    relevant: bool


GradeValue = str | int | float


def _integral(value: GradeValue) -> int | None:
    """The integer a value denotes (``3``, ``3.0``, ``"3"``), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    text = value.strip()
    if text.lstrip("+-").isdigit():
        return int(text)
    return None


@dataclass(frozen=True)
class GradeScale:
    """An ordered, named set of grades with aliases.

    ``grades`` are in ascending order (``level`` is the position). ``aliases`` map extra spellings (matched
    case-insensitively) to grade names. Integer values are accepted as levels.
    """

    name: str
    grades: tuple[Grade, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.grades:
            raise GradeError(f"grade scale {self.name!r} has no grades")
        names = [g.name for g in self.grades]
        if len(set(names)) != len(names):
            raise GradeError(f"grade scale {self.name!r} repeats a grade name: {names}")
        for index, grade in enumerate(self.grades):
            if grade.level != index:
                raise GradeError(f"grade {grade.name!r} of scale {self.name!r} has level {grade.level}, "
                                 f"expected {index} (grades are listed in ascending order)")
            if not (math.isfinite(grade.gain)):
                raise GradeError(f"grade {grade.name!r} of scale {self.name!r} has a non-finite gain")
        for alias, target in self.aliases.items():
            if target not in names:
                raise GradeError(f"alias {alias!r} of scale {self.name!r} names unknown grade {target!r}")
        lookup: dict[str, Grade] = {}
        for grade in self.grades:
            lookup[grade.name.casefold()] = grade
        for alias, target in self.aliases.items():
            lookup[alias.casefold()] = self.grades[names.index(target)]
        object.__setattr__(self, "_lookup", lookup)

    @property
    def max_level(self) -> int:
        return len(self.grades) - 1

    def describe(self) -> str:
        """The accepted values, for error messages."""
        parts = [f"{g.name}={g.gain:g}" for g in self.grades]
        extra = sorted(self.aliases)
        text = f"{self.name} scale ({', '.join(parts)}; levels 0..{self.max_level}"
        return text + (f"; aliases {', '.join(extra)})" if extra else ")")

    def parse(self, value: GradeValue) -> Grade:
        """The grade a label denotes; :class:`GradeError` naming the value and the scale otherwise."""
        lookup: dict[str, Grade] = self._lookup  # type: ignore[attr-defined]
        if isinstance(value, str):
            found = lookup.get(value.strip().casefold())
            if found is not None:
                return found
        level = _integral(value) if isinstance(value, (str, int, float)) else None
        if level is not None and 0 <= level <= self.max_level:
            return self.grades[level]
        raise GradeError(f"unknown grade {value!r}: not on the {self.describe()}")

    def gain(self, value: GradeValue) -> float:
        return self.parse(value).gain


def four_level_scale() -> GradeScale:
    """The four-level scale 高/中/低/无 (high, medium, low, none) with gains 1 / 0.7 / 0.3 / 0; 高 and 中
    relevant: the source notes' scale, and the default (spelled ``four-level``; ``seed`` and ``default``
    are accepted aliases)."""
    grades = (
        Grade("无", 0, 0.0, False),
        Grade("低", 1, 0.3, False),
        Grade("中", 2, 0.7, True),
        Grade("高", 3, 1.0, True),
    )
    aliases = {"none": "无", "low": "低", "medium": "中", "high": "高", "irrelevant": "无"}
    return GradeScale("four-level", grades, aliases)


FOUR_LEVEL_SCALE = four_level_scale()


@dataclass(frozen=True)
class TrecScale:
    """TREC integer grades: gain = the grade (as trec_eval), relevant iff grade ≥ ``min_relevant``.

    Negative grades are accepted (trec_eval gives them their own value as gain); ERR clamps them to 0.
    ``max_level`` is the top grade for ERR; ``None`` lets the caller take the largest grade in its qrels.
    """

    name: str = "trec"
    min_relevant: int = 1
    max_level: int | None = None

    def describe(self) -> str:
        return f"trec scale (integer grades; relevant from {self.min_relevant})"

    def parse(self, value: GradeValue) -> Grade:
        level = _integral(value)
        if level is None:
            raise GradeError(f"unknown grade {value!r}: not on the {self.describe()}")
        return Grade(str(level), level, float(level), level >= self.min_relevant)

    def gain(self, value: GradeValue) -> float:
        return self.parse(value).gain


Scale = GradeScale | TrecScale


def best_gain(scale: Scale) -> float | None:
    """The largest gain a grade of ``scale`` has (None: integer TREC grades have no largest); what bounds a
    session's DCG@k (the canary's exact bounds, ``CanaryConfig.with_bounds``).

    >>> best_gain(FOUR_LEVEL_SCALE), best_gain(TrecScale())
    (1.0, None)
    """
    if isinstance(scale, TrecScale):
        return None
    return max(grade.gain for grade in scale.grades)


def parse_scale(spec: str) -> Scale:
    """A scale from a command-line spec.

    * ``four-level`` (default; aliases ``seed``, ``default``): 高/中/低/无;
    * ``trec`` or ``trec:N``: integer grades, relevant from N (default 1);
    * a custom list in ascending order, ``name=gain,…`` with ``@name`` naming the lowest relevant grade:
      ``bad=0,fair=0.5,good=1@fair``.

    >>> parse_scale("bad=0,fair=0.5,good=1@fair").parse("good").relevant
    True
    """
    text = spec.strip()
    if text in {"", "four-level", "seed", "default"}:
        return FOUR_LEVEL_SCALE
    if text == "trec" or text.startswith("trec:"):
        threshold = text.partition(":")[2] or "1"
        level = _integral(threshold)
        if level is None:
            raise GradeError(f"bad scale {spec!r}: 'trec:N' needs an integer N, got {threshold!r}")
        return TrecScale(min_relevant=level)
    body, _, relevant_from = text.partition("@")
    pairs: list[tuple[str, float]] = []
    for part in body.split(","):
        name, sep, gain_text = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise GradeError(f"bad scale {spec!r}: expected 'four-level', 'trec[:N]' or "
                             f"'name=gain,…[@name]', got part {part!r}")
        try:
            gain = float(gain_text)
        except ValueError:
            raise GradeError(
                f"bad scale {spec!r}: gain {gain_text.strip()!r} of {name!r} is not a number"
            ) from None
        pairs.append((name, gain))
    names = [n for n, _ in pairs]
    threshold_name = relevant_from.strip() or names[-1]
    if threshold_name not in names:
        raise GradeError(f"bad scale {spec!r}: relevant-from grade {threshold_name!r} is not one of {names}")
    cut = names.index(threshold_name)
    return GradeScale("custom", tuple(Grade(n, i, g, i >= cut) for i, (n, g) in enumerate(pairs)))
