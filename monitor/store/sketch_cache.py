"""The query-frequency sketch of the partitions a worker owns, in memory: read once, then kept by its commits.

An impression without ``query_bucket`` is classified by its query's count-min estimate over the last day's
sketch slices (``cmsb:<index>``, one per hour by default: ``depth × width`` u32 counters in a string that
a commit increments with one ``BITFIELD`` call). Reading those cells from Redis for every batch
(a Lua script returning every slice's cells of the batch's queries) cost about 2 µs of Redis CPU per
realistic message, and as much again to pack and parse. But a partition's sketch has one writer: the
worker that owns the partition (every commit is fenced), so the owner can keep the slices it has read in
memory and add its own committed increments to them. A slice is read whole (``HGETALL``) the first time
a batch needs it, kept as an array of ``depth × width`` counts (64 KiB at the defaults: about 1.6 MiB for
the day of slices of each partition held), and dropped once it leaves the frequency window.

What the cache holds equals Redis as long as this worker owns the partition and its commits land: a
commit that fails in any way (fenced by another writer, an error whose outcome is unknown) forgets the
partition, and so does the processor when the partition is revoked or Redis is found to have lost
writes; the next batch reads it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

import numpy as np

from monitor.core.stream.config import StreamConfig


@lru_cache(maxsize=65536)
def field_index(field: str, width: int) -> int:
    """The position of cell ``"row:column"`` in a slice's array of ``depth × width`` counts."""
    row, column = field.split(":")
    return int(row) * width + int(column)


@lru_cache(maxsize=65536)
def bitfield_offset(field: str, width: int) -> str:
    """The cell's offset as ``BITFIELD`` takes it for u32 counters: ``#<field_index>``."""
    return f"#{field_index(field, width)}"


class SketchCache:
    """Sketch slices per partition, as arrays of counts (see the module docstring)."""

    def __init__(self, config: StreamConfig) -> None:
        self.width, self.size = config.sketch_width, config.sketch_width * config.sketch_depth
        self.keep = config.frequency_slices + 1
        self._slices: dict[int, dict[int, np.ndarray]] = {}

    def missing(self, partition: int, indices: Iterable[int]) -> list[int]:
        """The slices of ``indices`` not held for ``partition`` (to read from Redis)."""
        held = self._slices.get(partition, {})
        return sorted(i for i in set(indices) if i not in held)

    def load(self, partition: int, index: int, counters: bytes | None,
             stored: Mapping[bytes | str, bytes | str] | None = None) -> None:
        """A slice as read from Redis: ``cmsb:<index>`` (``GET``: the u32 counters, big-endian, as
        ``BITFIELD`` keeps them; a string shorter than the slice holds zeros beyond its end) and a hash
        ``cms:<index>`` of the same slice written before the counters were (``HGETALL``; empty since)."""
        counts = np.zeros(self.size, dtype=np.float64)
        if counters:
            stored_counts = np.frombuffer(counters[:4 * self.size], dtype=">u4")
            counts[:stored_counts.size] += stored_counts
        for field, value in (stored or {}).items():
            name = field.decode() if isinstance(field, bytes) else field
            counts[field_index(name, self.width)] += float(value)
        self._slices.setdefault(partition, {})[index] = counts

    def prune(self, partition: int, needed: Iterable[int]) -> None:
        """Drop the slices a batch that needs ``needed`` does not, once older than the newest's window
        (an impression a day older than the others needs its own day of slices, for that batch)."""
        held, wanted = self._slices.get(partition), set(needed)
        if held and wanted:
            newest = max(max(held), max(wanted))
            for old in [i for i in held if i <= newest - self.keep and i not in wanted]:
                del held[old]

    def counts(self, partition: int, index: int, fields: list[str]) -> dict[str, float]:
        """``fields``' counts in a held slice (zeros included: an empty cell reads as 0 either way)."""
        positions = [field_index(f, self.width) for f in fields]
        return dict(zip(fields, self._slices[partition][index][positions].tolist(), strict=True))

    def sums(self, partition: int, indices: Iterable[int], fields: list[str]) -> dict[str, float]:
        """``fields``' counts summed over several held slices (a window): what an estimate adds up."""
        positions = [field_index(f, self.width) for f in fields]
        held = self._slices[partition]
        total = np.zeros(len(positions), dtype=np.float64)
        for index in indices:
            total += held[index][positions]
        return dict(zip(fields, total.tolist(), strict=True))

    def committed(self, partition: int, increments: Mapping[int, Mapping[str, float]]) -> None:
        """A commit of ``partition`` landed with these sketch increments (slice → cell → amount)."""
        held = self._slices.get(partition)
        if held is None:
            return
        for index, cells in increments.items():
            counts = held.get(index)
            if counts is None:  # not held: read whole when a batch needs it (it has these then)
                continue
            width = self.width  # one vectorised add: the cells of a slice's increments are distinct
            counts[[field_index(field, width) for field in cells]] += np.fromiter(cells.values(), np.float64,
                                                                                 len(cells))

    def forget(self, partition: int) -> None:
        self._slices.pop(partition, None)
