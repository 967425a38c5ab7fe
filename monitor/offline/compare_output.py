"""Formatting of a comparison of runs (:class:`~monitor.core.run_comparison.RunComparison`): a table,
JSON or CSV (docs/evaluate.md, "Comparing runs").

JSON: ``{"baseline", "runs", "queries", "missing", "alpha", "confidence", "test", "correction",
"iterations", "seed", "measures": {measure: {run: {...}}}}``; the baseline's entry has ``n`` and ``mean``,
each other run's adds ``baseline_mean``, ``difference``, ``relative_difference``, ``ci`` ([low, high]),
``t``, ``p_t``, ``p_randomization``, ``p_adjusted``, ``significant`` and ``note``; an undefined value is
``null`` and an infinite one the string ``"+Inf"``. CSV: one row per measure and run, the same fields,
empty where undefined.
"""

from __future__ import annotations

import csv
import io
import json
import math

from monitor.core.run_comparison import Row, RunComparison
from monitor.offline.output import csv_value, json_value, text_value

FIELDS = ("n", "mean", "baseline_mean", "difference", "relative_difference", "ci_low", "ci_high", "t", "p_t",
          "p_randomization", "p_adjusted", "significant", "note")


def _fields(row: Row) -> dict[str, object]:
    """The row's fields as JSON values (the baseline's: n and mean only)."""
    entry: dict[str, object] = {"n": row.n, "mean": json_value(row.mean)}
    if row.baseline:
        return entry
    low, high = row.interval if row.interval is not None else (None, None)
    entry.update({
        "baseline_mean": json_value(row.baseline_mean), "difference": json_value(row.difference),
        "relative_difference": json_value(row.relative),
        "ci": None if row.interval is None else [json_value(low), json_value(high)],
        "t": json_value(row.t), "p_t": json_value(row.p_t),
        "p_randomization": json_value(row.p_randomization),
        "p_adjusted": json_value(row.p_adjusted), "significant": row.significant, "note": row.note,
    })
    return entry


def _json(comparison: RunComparison) -> str:
    settings = comparison.settings
    measures: dict[str, dict[str, object]] = {}
    for row in comparison.rows:
        measures.setdefault(str(row.measure), {})[row.run] = _fields(row)
    document = {
        "baseline": comparison.baseline, "runs": list(comparison.runs), "queries": comparison.queries,
        "missing": comparison.missing, "alpha": settings.alpha, "confidence": 1.0 - settings.alpha,
        "test": settings.test, "correction": settings.correction, "iterations": settings.iterations,
        "seed": settings.seed, "measures": measures,
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def _csv(comparison: RunComparison) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["measure", "run", *FIELDS])
    for row in comparison.rows:
        low, high = row.interval if row.interval is not None else (None, None)
        numbers = [row.mean, row.baseline_mean, row.difference, row.relative, low, high, row.t, row.p_t,
                   row.p_randomization, row.p_adjusted]
        significant = "" if row.significant is None else str(row.significant).lower()
        writer.writerow([str(row.measure), row.run, row.n, *(csv_value(v) for v in numbers), significant,
                         row.note or ""])
    return buffer.getvalue()


def _signed(value: float | None, digits: int) -> str:
    if value is None or math.isinf(value):
        return text_value(value, digits)
    return f"{value:+.{digits}f}"


def _p(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    floor = 10.0 ** -digits
    return f"<{floor:.{digits}f}" if value < floor else f"{value:.{digits}f}"


def _table(comparison: RunComparison, digits: int) -> str:
    settings = comparison.settings
    level = f"{100 * (1 - settings.alpha):g}%"
    header = ["measure", "run", "n", "mean", "Δ", "Δ%", f"{level} CI of Δ", "p(t)", "p(rand)"]
    if settings.correction != "none":
        header.append(f"p({settings.correction})")
    header.append("sig")
    rows, notes = [], []
    previous = None
    for row in comparison.rows:
        measure = str(row.measure)
        cells = [measure if measure != previous else "", row.run, str(row.n), text_value(row.mean, digits)]
        previous = measure
        if row.baseline:
            rows.append(cells + [""] * (len(header) - len(cells)))
            continue
        interval = ("-" if row.interval is None else
                    f"[{_signed(row.interval[0], digits)}, {_signed(row.interval[1], digits)}]")
        relative = "-" if row.relative is None else f"{100 * row.relative:+.{max(digits - 2, 1)}f}%"
        cells += [_signed(row.difference, digits), relative, interval, _p(row.p_t, digits),
                  _p(row.p_randomization, digits)]
        if settings.correction != "none":
            cells.append(_p(row.p_adjusted, digits))
        cells.append("*" if row.significant else "")
        rows.append(cells)
        if row.note:
            notes.append(f"note: {measure}, {row.run}: {row.note}")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                       enumerate(zip(row, widths, strict=True))).rstrip() for row in [header, *rows]]
    test = "paired t-test" if settings.test == "t" else "randomization test"
    adjusted = ("" if settings.correction == "none"
                else f", {settings.correction.capitalize()}-adjusted over the runs")
    lines += ["",
              f"baseline {comparison.baseline}; {comparison.queries} queries in every run; "
              f"*: p < {settings.alpha:g} ({test}{adjusted}).",
              "Δ: difference from the baseline over the same queries (PNR: of ratios of summed pair counts); "
              "CI: t distribution.",
              f"p(rand): randomization test, {settings.iterations} random sign flips (every flip if fewer), "
              f"seed {settings.seed}."]
    return "\n".join(lines + notes) + "\n"


def render_comparison(fmt: str, comparison: RunComparison, digits: int = 4) -> str:
    if fmt == "json":
        return _json(comparison)
    if fmt == "csv":
        return _csv(comparison)
    return _table(comparison, digits)
