"""Reading measures: :func:`parse_measure` over the registered measures, and :func:`accepted_measures`.

Grammar: ``NAME [ "(" key=value {"," key=value} ")" ] [ "@" k ]``. Parameters equal to their default are
left out of the canonical form; names are matched case-insensitively and through each measure's aliases.
"""

from __future__ import annotations

import re

from monitor.core.errors import MeasureError
from monitor.core.measures.registry import Measure, ParamValue, canonical_name, definitions, lookup

_SYNTAX = re.compile(r"^\s*([A-Za-z]+)\s*(?:\((.*)\))?\s*(?:@\s*(\S+))?\s*$")
_CUTOFF_HINT = {"optional": "[@k]", "required": "@k", "none": ""}


def accepted_measures() -> str:
    """Every registered measure with its parameters and cutoff rule, in registration order."""
    parts = []
    for definition in definitions():
        spec = definition.spec
        params = ",".join(f"{key}={p.accepted}" for key, p in spec.params.items())
        parts.append(spec.name + (f"({params})" if params else "") + _CUTOFF_HINT[spec.cutoff])
    return ", ".join(parts)


def parse_measure(text: str) -> Measure:
    """Parse a measure string; :class:`MeasureError` lists what is accepted."""
    match = _SYNTAX.match(text)
    name = canonical_name(match.group(1)) if match else None
    if match is None or name is None:
        raise MeasureError(f"unknown measure {text!r}; accepted: {accepted_measures()}")
    spec = lookup(name).spec
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
