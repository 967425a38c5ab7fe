"""Parameter parsers the measure modules share: a word from a fixed set, a probability."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from monitor.core.errors import MeasureError
from monitor.core.measures.registry import ParamValue


def choice(*words: str, aliases: Mapping[str, str] | None = None) -> Callable[[str], ParamValue]:
    """A parameter that is one of ``words``; ``aliases``: older spellings, taken as the word they name."""
    def parse(text: str) -> ParamValue:
        if aliases and text in aliases:
            return aliases[text]
        if text not in words:
            raise MeasureError(f"expected one of {', '.join(words)}, got {text!r}")
        return text

    return parse


def probability(open_top: bool) -> Callable[[str], ParamValue]:
    """A number in (0, 1), or in (0, 1] when not ``open_top``."""
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
