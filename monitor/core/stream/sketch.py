"""A count-min sketch (Cormode & Muthukrishnan 2005) of query frequencies over a trailing window.

Memory is ``depth × width`` counters per time slice, whatever the number of distinct queries. The
estimate of a query's count is min over rows of its counters summed over the window's slices: never
below the true count, above it by at most ε·N with probability 1 − δ for width ⌈e/ε⌉, depth ⌈ln 1/δ⌉.
Cells come from a keyed BLAKE2b hash, so every worker and every restart maps a query to the same cells.

>>> cells = sketch_cells("蓝牙耳机", width=2048, depth=4)
>>> len(cells), all(0 <= c < 2048 for _, c in cells)
(4, True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import lru_cache

Cell = tuple[int, int]


@lru_cache(maxsize=16384)
def sketch_cells(query: str, width: int, depth: int) -> tuple[Cell, ...]:
    """The query's cell in each row (remembered for the most recent 16,384 queries: head queries repeat)."""
    digest = hashlib.blake2b(query.encode("utf-8"), digest_size=8 * depth, person=b"cms-query").digest()
    return tuple((row, int.from_bytes(digest[8 * row:8 * row + 8], "little") % width) for row in range(depth))


@lru_cache(maxsize=65536)  # at most width × depth distinct cells
def cell_field(cell: Cell) -> str:
    return f"{cell[0]}:{cell[1]}"


@lru_cache(maxsize=16384)
def cell_fields(query: str, width: int, depth: int) -> tuple[str, ...]:
    """The fields (:func:`cell_field`) of the query's cells, remembered as :func:`sketch_cells` is."""
    return tuple(map(cell_field, sketch_cells(query, width, depth)))


def estimate(cells: Sequence[Cell], slices: Sequence[Mapping[str, float]]) -> float:
    """min over rows of the cell's count summed over slices (0 for an empty sketch)."""
    return estimate_fields(tuple(map(cell_field, cells)), slices)


def estimate_fields(fields: Sequence[str], slices: Sequence[Mapping[str, float]]) -> float:
    """:func:`estimate` from the cells' fields (:func:`cell_fields`)."""
    if not fields:
        return 0.0
    return min(sum(counts.get(name, 0.0) for counts in slices) for name in fields)


def classify(frequency: float, head_min: float, torso_min: float) -> str:
    """head / torso / tail from an estimated count over the frequency window."""
    if frequency >= head_min:
        return "head"
    if frequency >= torso_min:
        return "torso"
    return "tail"
