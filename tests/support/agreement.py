"""Brute-force references for rater agreement, written from the definitions' other form (no coincidence
matrix, no marginal products), for the tests of ``monitor/core/agreement/``.

Krippendorff's alpha as pairwise disagreements (Krippendorff 2011, eq. for D_o and D_e before the
coincidence matrix is introduced): the observed disagreement is the mean δ² over the ordered pairs of
values within each unit, a unit of m values weighing each of its pairs 1/(m − 1); the expected one is the
mean δ² over every ordered pair of distinct pairable values, wherever they are. The ordinal δ² counts
values between two levels by walking over the list of pairable values.

Weighted kappa as means over items: 1 − mean_i w(a_i, b_i) / mean_{i,j} w(a_i, b_j), the second mean
over every (item i of rater A, item j of rater B).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction


def alpha_pairwise(units: Sequence[Sequence[int | None]], metric: str,
                   values: Sequence[float] | None = None) -> float | None:
    pairable = [[v for v in unit if v is not None] for unit in units]
    pairable = [unit for unit in pairable if len(unit) >= 2]
    every = [v for unit in pairable for v in unit]
    n = len(every)
    if n < 2:
        return None

    def value(level: int) -> float:
        return float(level) if values is None else float(values[level])

    def delta(c: int, k: int) -> float:
        if metric == "nominal":
            return 0.0 if c == k else 1.0
        if metric == "ordinal":
            low, high = min(c, k), max(c, k)
            between = sum(1 for v in every if low <= v <= high)
            ends = sum(1 for v in every if v == c) + sum(1 for v in every if v == k)
            return (between - ends / 2) ** 2
        if metric == "interval":
            return (value(c) - value(k)) ** 2
        if metric == "ratio":
            total = value(c) + value(k)
            return 0.0 if total == 0 else ((value(c) - value(k)) / total) ** 2
        raise ValueError(metric)

    observed = 0.0
    for unit in pairable:
        m = len(unit)
        observed += sum(delta(unit[i], unit[j]) for i in range(m) for j in range(m) if i != j) / (m - 1)
    observed /= n
    expected = sum(delta(every[i], every[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    if expected == 0:
        return None
    return 1.0 - observed / expected


WEIGHTS: dict[str, Callable[[int, int], int]] = {
    "nominal": lambda i, j: int(i != j),
    "linear": lambda i, j: abs(i - j),
    "quadratic": lambda i, j: (i - j) ** 2,
}


def kappa_items(a: Sequence[int], b: Sequence[int], weights: str) -> Fraction | None:
    """Weighted kappa of two raters' grades of the same items, in exact fractions."""
    w = WEIGHTS[weights]
    if not a:
        return None
    observed = Fraction(sum(w(x, y) for x, y in zip(a, b, strict=True)), len(a))
    chance = Fraction(sum(w(x, y) for x in a for y in b), len(a) * len(b))
    if chance == 0:
        return None
    return 1 - observed / chance
