"""``GradeMatrix``: integer counts of graded pairs, and the agreement they give.

Row ``i``, column ``j`` counts the pairs in which one grade was level ``i`` and the other level ``j``: two
raters of the same unit (rows: the first rater, or the annotator being judged; columns: the other), or a
gold task's known grade (row) and the grade an annotator gave (column). Counts are integers, so matrices
merge by addition exactly, in any order, and a contribution added before is taken back exactly
(``take_back``): the same shape as the stream's other sums (``Stats``, ``PairAggregate``).

Weighted Cohen's kappa (Cohen 1968), with disagreement weights ``w``:

    κ_w = 1 − Σ_ij w_ij o_ij / Σ_ij w_ij e_ij,   e_ij = (row_i · col_j) / N

``nominal``: w = [i ≠ j] (Cohen's 1960 kappa); ``linear``: w = |i − j|; ``quadratic``: w = (i − j)². A
scale factor on w cancels, so the number of levels does not change κ. No pairs, or no expected
disagreement (both raters used one and the same single level): κ is undefined and ``kappa`` gives None.

>>> m = GradeMatrix.of_pairs(2, [(0, 0)] * 20 + [(0, 1)] * 5 + [(1, 0)] * 10 + [(1, 1)] * 15)
>>> round(m.kappa("nominal"), 6), m.exact_share()
(0.4, 0.7)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.core.errors import MonitorError

Weights = Literal["nominal", "linear", "quadratic"]
WEIGHTS: tuple[Weights, ...] = ("nominal", "linear", "quadratic")
IntMatrix = npt.NDArray[np.int64]


def check_levels(levels: int) -> int:
    """``levels`` as an int ≥ 1, or :class:`MonitorError` naming it."""
    if isinstance(levels, bool) or not isinstance(levels, int | np.integer) or levels < 1:
        raise MonitorError(f"levels must be an integer ≥ 1, got {levels!r}")
    return int(levels)


def check_level(level: int, levels: int, what: str = "grade") -> int:
    """A grade's level as an int in 0..levels−1, or :class:`MonitorError` naming it."""
    if isinstance(level, bool) or not isinstance(level, int | np.integer) or not 0 <= level < levels:
        raise MonitorError(f"{what} {level!r} is not a level of the scale (0..{levels - 1})")
    return int(level)


def disagreement_weights(levels: int, weights: Weights) -> npt.NDArray[np.float64]:
    """The levels × levels disagreement weights of ``weights`` (0 on the diagonal)."""
    grid = np.arange(levels, dtype=np.float64)
    gap = np.abs(grid[:, None] - grid[None, :])
    if weights == "nominal":
        return (gap > 0).astype(np.float64)
    if weights == "linear":
        return gap
    if weights == "quadratic":
        return gap * gap
    raise MonitorError(f"unknown kappa weights {weights!r}: expected one of {', '.join(WEIGHTS)}")


@dataclass
class GradeMatrix:
    """levels × levels counts of graded pairs (row: one grade, column: the other)."""

    counts: IntMatrix

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts)
        if counts.ndim != 2 or counts.shape[0] != counts.shape[1] or counts.shape[0] < 1:
            raise MonitorError(f"a grade matrix is square with at least one level, got shape {counts.shape}")
        if not np.issubdtype(counts.dtype, np.integer):
            raise MonitorError(f"a grade matrix holds integer counts, got dtype {counts.dtype}")
        self.counts = counts.astype(np.int64, copy=True)

    @classmethod
    def empty(cls, levels: int) -> GradeMatrix:
        levels = check_levels(levels)
        return cls(np.zeros((levels, levels), dtype=np.int64))

    @classmethod
    def of_pairs(cls, levels: int, pairs: Iterable[tuple[int, int]]) -> GradeMatrix:
        """The matrix of (row, column) level pairs."""
        matrix = cls.empty(levels)
        for row, column in pairs:
            matrix.add(row, column)
        return matrix

    @property
    def levels(self) -> int:
        return int(self.counts.shape[0])

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def add(self, row: int, column: int, count: int = 1) -> None:
        """Count ``count`` more pairs (row, column)."""
        self.counts[check_level(row, self.levels), check_level(column, self.levels)] += count

    def _same_shape(self, other: GradeMatrix) -> None:
        if other.levels != self.levels:
            raise MonitorError(f"cannot combine grade matrices of {self.levels} and {other.levels} levels")

    def merge(self, other: GradeMatrix) -> None:
        self._same_shape(other)
        self.counts += other.counts

    def take_back(self, other: GradeMatrix) -> None:
        """Take back ``other``, merged in before: the inverse of :meth:`merge` (exact: integers)."""
        self._same_shape(other)
        self.counts -= other.counts

    def __add__(self, other: GradeMatrix) -> GradeMatrix:
        self._same_shape(other)
        return GradeMatrix(self.counts + other.counts)

    def __sub__(self, other: GradeMatrix) -> GradeMatrix:
        self._same_shape(other)
        return GradeMatrix(self.counts - other.counts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GradeMatrix) and np.array_equal(self.counts, other.counts)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def exact_share(self) -> float | None:
        """The share of pairs with equal grades (a gold matrix: exact gold accuracy); None without pairs."""
        total = self.total
        return int(np.trace(self.counts)) / total if total > 0 else None

    def within_share(self, steps: int = 1) -> float | None:
        """The share of pairs whose grades differ by at most ``steps`` levels; None without pairs."""
        if steps < 0:
            raise MonitorError(f"steps must be ≥ 0, got {steps}")
        total = self.total
        if total <= 0:
            return None
        grid = np.arange(self.levels)
        near = np.abs(grid[:, None] - grid[None, :]) <= steps
        return int(self.counts[near].sum()) / total

    def kappa(self, weights: Weights = "quadratic") -> float | None:
        """Weighted Cohen's kappa of the two raters (rows and columns); see the module docstring."""
        w = disagreement_weights(self.levels, weights)
        total = self.total
        if total <= 0:
            return None
        observed = self.counts.astype(np.float64)
        expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / total
        chance = float((w * expected).sum())
        if chance <= 0.0:
            return None
        return 1.0 - float((w * observed).sum()) / chance

    def fields(self) -> dict[str, int]:
        """The non-zero counts as ``"row|column" → count`` (a Redis hash's fields, summed by HINCRBY)."""
        rows, columns = np.nonzero(self.counts)
        return {f"{r}|{c}": int(self.counts[r, c])
                for r, c in zip(rows.tolist(), columns.tolist(), strict=True)}

    @classmethod
    def from_fields(cls, levels: int, fields: Mapping[str, int]) -> GradeMatrix:
        """The inverse of :meth:`fields`; :class:`MonitorError` naming a field that is not ``row|column``."""
        matrix = cls.empty(levels)
        for name, count in fields.items():
            row, sep, column = name.partition("|")
            if not sep or not row.isdigit() or not column.isdigit():
                raise MonitorError(f"grade matrix field {name!r} is not 'row|column'")
            matrix.add(int(row), int(column), int(count))
        return matrix
