"""Formatting of evaluation results: an aligned table, JSON or CSV.

JSON: ``{"aggregate": {measure: value}, "per_query": {qid: {measure: value}}}`` with canonical measure
names; an undefined value is ``null`` and an infinite PNR is the string ``"+Inf"`` (JSON has no infinity).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence

from monitor.core.measures import Measure

Values = Mapping[Measure, float | None]


def json_value(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def csv_value(value: float | None) -> str:
    """Full precision (repr round-trips), ``+Inf``, or empty for undefined."""
    shown = json_value(value)
    return "" if shown is None else shown if isinstance(shown, str) else repr(shown)


def text_value(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.{digits}f}"


def render(
    fmt: str,
    measures: Sequence[Measure],
    aggregate: Values,
    per_query: Mapping[str, Values] | None,
    digits: int = 4,
) -> str:
    if fmt == "json":
        document: dict[str, object] = {"aggregate": {str(m): json_value(aggregate[m]) for m in measures}}
        if per_query is not None:
            document["per_query"] = {q: {str(m): json_value(v[m]) for m in measures}
                                     for q, v in per_query.items()}
        return json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["query", "measure", "value"])
        entries = [*(per_query or {}).items(), ("all", aggregate)]
        for query, values in entries:
            for m in measures:
                writer.writerow([query, str(m), csv_value(values[m])])
        return buffer.getvalue()
    header = ["query", *(str(m) for m in measures)]
    rows = [[q, *(text_value(v[m], digits) for m in measures)] for q, v in (per_query or {}).items()]
    rows.append(["all", *(text_value(aggregate[m], digits) for m in measures)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                       enumerate(zip(row, widths, strict=True))) for row in [header, *rows]]
    return "\n".join(lines) + "\n"
