"""``Coincidence``: Krippendorff's alpha from integer counts that merge.

Krippendorff's alpha (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"; Hayes &
Krippendorff 2007) for any number of raters per unit and missing values:

    α = 1 − D_o / D_e = 1 − (n − 1) Σ_ck o_ck δ²_ck / Σ_ck n_c n_k δ²_ck

A unit with ``m ≥ 2`` values (the grades it got; a unit with one grade is not pairable and adds
nothing) adds each ordered pair of its values from two different raters to the coincidence matrix with
weight 1/(m − 1); ``n_c`` are the matrix's row sums and ``n`` their total (the pairable values). The
difference functions δ² (Krippendorff 2011, section C):

* ``nominal``: 1 if c ≠ k;
* ``ordinal``: (Σ_{g=c..k} n_g − (n_c + n_k)/2)², on the levels' order (the grades' default: an ordered
  scale whose steps are not known to be equal);
* ``interval``: (v_c − v_k)², with ``v`` the levels (0, 1, 2, …) or given values (e.g. the gains);
* ``ratio``: ((v_c − v_k)/(v_c + v_k))².

The state is not the matrix itself (fractions 1/(m − 1) would not add exactly) but, per unit size ``m``,
the integer counts of ordered value pairs: ``o = Σ_m pairs_m/(m − 1)``. Counts merge by addition in any
order and a unit's contribution is taken back exactly, e.g. when its second or third grade arrives.

No pairable values, or no expected disagreement (every value on one level): α is undefined, None.

>>> c = Coincidence.of_units(4, [[0, 0], [1, 1], [2, 2], [3, None, 3]])
>>> c.alpha("ordinal"), c.values
(1.0, 8)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.core.agreement.matrix import IntMatrix, check_level, check_levels
from monitor.core.errors import MonitorError

Metric = Literal["nominal", "ordinal", "interval", "ratio"]
METRICS: tuple[Metric, ...] = ("nominal", "ordinal", "interval", "ratio")
FloatMatrix = npt.NDArray[np.float64]


def unit_pairs(levels: int, values: Iterable[int | None]) -> tuple[int, IntMatrix]:
    """A unit's size ``m`` (its values, missing ones left out) and its ordered pairs of values from two
    different raters: ``n_uc · n_uk`` for c ≠ k, ``n_uc (n_uc − 1)`` for c = k."""
    present = [check_level(v, levels) for v in values if v is not None]
    counts = np.bincount(np.asarray(present, dtype=np.int64), minlength=levels).astype(np.int64)
    return len(present), np.outer(counts, counts) - np.diag(counts)


def difference(metric: Metric, totals: npt.NDArray[np.float64],
               values: Sequence[float] | None = None) -> FloatMatrix:
    """The levels × levels δ² of ``metric``; ``totals`` (n_c) for ``ordinal``, ``values`` (default: the
    levels) for ``interval`` and ``ratio``."""
    levels = len(totals)
    if values is None:
        v = np.arange(levels, dtype=np.float64)
    else:
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (levels,) or not np.all(np.isfinite(v)):
            raise MonitorError(f"values must be {levels} finite numbers, one per level, got {list(values)}")
    if metric == "nominal":
        return (~np.eye(levels, dtype=bool)).astype(np.float64)
    if metric == "ordinal":
        n = np.asarray(totals, dtype=np.float64)
        cum = np.cumsum(n)
        low = np.minimum.outer(np.arange(levels), np.arange(levels))
        high = np.maximum.outer(np.arange(levels), np.arange(levels))
        between = cum[high] - cum[low] + n[low]
        return (between - (n[:, None] + n[None, :]) / 2.0) ** 2
    if metric == "interval":
        return (v[:, None] - v[None, :]) ** 2
    if metric == "ratio":
        if np.any(v < 0):
            raise MonitorError(f"the ratio metric needs values ≥ 0, got {v.tolist()}")
        sums = v[:, None] + v[None, :]
        gaps = v[:, None] - v[None, :]
        return np.divide(gaps, sums, out=np.zeros_like(gaps), where=sums > 0) ** 2
    raise MonitorError(f"unknown alpha metric {metric!r}: expected one of {', '.join(METRICS)}")


@dataclass
class Coincidence:
    """Per unit size ``m`` (≥ 2), the levels × levels counts of ordered value pairs within units."""

    levels: int
    by_size: dict[int, IntMatrix] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.levels = check_levels(self.levels)
        for size, pairs in self.by_size.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 2:
                raise MonitorError(f"a unit size is an integer ≥ 2, got {size!r}")
            if np.shape(pairs) != (self.levels, self.levels):
                raise MonitorError(f"pairs of size {size} have shape {np.shape(pairs)}, expected "
                                   f"{(self.levels, self.levels)}")
        self.by_size = {m: np.asarray(p, dtype=np.int64).copy() for m, p in self.by_size.items()}

    @classmethod
    def of_units(cls, levels: int, units: Iterable[Iterable[int | None]]) -> Coincidence:
        """The counts of many units, each the levels its raters gave (None: missing)."""
        out = cls(levels)
        for unit in units:
            out.add_unit(unit)
        return out

    def _apply(self, values: Iterable[int | None], sign: int) -> None:
        size, pairs = unit_pairs(self.levels, values)
        if size < 2:
            return
        held = self.by_size.setdefault(size, np.zeros((self.levels, self.levels), dtype=np.int64))
        held += sign * pairs

    def add_unit(self, values: Iterable[int | None]) -> None:
        """Count one unit's values (a unit with fewer than two adds nothing: not pairable)."""
        self._apply(values, 1)

    def take_back_unit(self, values: Iterable[int | None]) -> None:
        """Take back a unit counted before with these values (exact: integers)."""
        self._apply(values, -1)

    def _check(self, other: Coincidence) -> None:
        if other.levels != self.levels:
            raise MonitorError(f"cannot combine coincidences of {self.levels} and {other.levels} levels")

    def merge(self, other: Coincidence) -> None:
        self._check(other)
        for size, pairs in other.by_size.items():
            self.by_size.setdefault(size, np.zeros_like(pairs))
            self.by_size[size] += pairs

    def take_back(self, other: Coincidence) -> None:
        """Take back ``other``, merged in before: the inverse of :meth:`merge`."""
        self._check(other)
        for size, pairs in other.by_size.items():
            self.by_size.setdefault(size, np.zeros_like(pairs))
            self.by_size[size] -= pairs

    def __add__(self, other: Coincidence) -> Coincidence:
        out = Coincidence(self.levels, self.by_size)
        out.merge(other)
        return out

    def __eq__(self, other: object) -> bool:
        """Equal counts (sizes whose counts are all zero count as absent)."""
        if not isinstance(other, Coincidence) or other.levels != self.levels:
            return False
        mine = {m: p for m, p in self.by_size.items() if p.any()}
        theirs = {m: p for m, p in other.by_size.items() if p.any()}
        return mine.keys() == theirs.keys() and all(np.array_equal(mine[m], theirs[m]) for m in mine)

    __hash__ = None  # type: ignore[assignment]  # mutable

    @property
    def units(self) -> int:
        """Pairable units counted: a unit of size m has m(m − 1) ordered pairs."""
        return sum(int(p.sum()) // (m * (m - 1)) for m, p in self.by_size.items())

    @property
    def values(self) -> int:
        """``n``: the pairable values, Σ over pairable units of their size."""
        return sum(int(p.sum()) // (m - 1) for m, p in self.by_size.items())

    def matrix(self) -> FloatMatrix:
        """The coincidence matrix ``o_ck`` (symmetric; row sums n_c), summed in the order of unit sizes so
        that the same counts give the same floats however they were merged."""
        out = np.zeros((self.levels, self.levels), dtype=np.float64)
        for size in sorted(self.by_size):
            out += self.by_size[size] / (size - 1)
        return out

    def alpha(self, metric: Metric = "ordinal", values: Sequence[float] | None = None) -> float | None:
        """Krippendorff's alpha with ``metric``'s δ² (module docstring); None when undefined."""
        if metric not in METRICS:
            raise MonitorError(f"unknown alpha metric {metric!r}: expected one of {', '.join(METRICS)}")
        o = self.matrix()
        totals = o.sum(axis=1)
        n = float(totals.sum())
        delta = difference(metric, totals, values)
        if n < 2:
            return None
        expected = float((np.outer(totals, totals) * delta).sum())
        if expected <= 0.0:
            return None
        return 1.0 - (n - 1.0) * float((o * delta).sum()) / expected

    def fields(self) -> dict[str, int]:
        """The non-zero counts as ``"m|c|k" → count`` (a Redis hash's fields, summed by HINCRBY)."""
        out: dict[str, int] = {}
        for size in sorted(self.by_size):
            pairs = self.by_size[size]
            for c, k in zip(*np.nonzero(pairs), strict=True):
                out[f"{size}|{c}|{k}"] = int(pairs[c, k])
        return out

    @classmethod
    def from_fields(cls, levels: int, fields: Mapping[str, int]) -> Coincidence:
        """The inverse of :meth:`fields`; :class:`MonitorError` naming a field that is not ``m|c|k``."""
        out = cls(levels)
        for name, count in fields.items():
            parts = name.split("|")
            if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) < 2:
                raise MonitorError(f"coincidence field {name!r} is not 'm|c|k' with m ≥ 2")
            size, c, k = (int(p) for p in parts)
            held = out.by_size.setdefault(size, np.zeros((out.levels, out.levels), dtype=np.int64))
            held[check_level(c, levels), check_level(k, levels)] += int(count)
        return out
