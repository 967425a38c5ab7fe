"""The worker's in-memory sketch slices (monitor/store/sketch_cache.py) against the slices as Redis
would hold them: loaded whole (u32 counters as BITFIELD keeps them, plus a hash of before them), kept by
committed increments, forgotten on demand, windowed."""

from __future__ import annotations

import random

import numpy as np

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.sketch import cell_field, sketch_cells
from monitor.store.sketch_cache import SketchCache, field_index

CONFIG = StreamConfig(sketch_width=64, sketch_depth=3, frequency_slices=4)


def test_field_index_is_row_major() -> None:
    assert field_index("0:0", 64) == 0 and field_index("2:5", 64) == 133


def test_counts_follow_loads_and_committed_increments_like_a_store_would() -> None:
    rng = random.Random(3)
    cache = SketchCache(CONFIG)
    store: dict[int, dict[str, float]] = {}  # what Redis holds: slice -> cell -> count
    queries = [f"q{n}" for n in range(40)]
    for index in range(10, 30):
        for _ in range(30):  # a commit's increments
            increments: dict[int, dict[str, float]] = {}
            for q in rng.sample(queries, 5):
                slot = rng.choice([index, index - 1])  # an impression of the previous slice now and then
                for cell in sketch_cells(q, CONFIG.sketch_width, CONFIG.sketch_depth):
                    increments.setdefault(slot, {}).setdefault(cell_field(cell), 0.0)
                    increments[slot][cell_field(cell)] += 1.0
            for slot, cells in increments.items():
                for f, amount in cells.items():
                    store.setdefault(slot, {})[f] = store.get(slot, {}).get(f, 0.0) + amount
            cache.committed(0, increments)
        wanted = list(range(index - CONFIG.frequency_slices + 1, index + 1))
        cache.prune(0, wanted)
        for n, slot in enumerate(cache.missing(0, wanted)):
            counters = np.zeros(CONFIG.sketch_width * CONFIG.sketch_depth, dtype=">u4")
            old: dict[bytes, bytes] = {}
            for f, v in store.get(slot, {}).items():  # half in the counters, the rest in an old hash
                if n % 2 == 0 or field_index(f, CONFIG.sketch_width) % 2:
                    counters[field_index(f, CONFIG.sketch_width)] = int(v)
                else:
                    old[f.encode()] = str(int(v)).encode()
            size = int(counters.nonzero()[0].max() + 1) if counters.any() else 0
            cache.load(0, slot, counters[:size].tobytes() or None, old)  # BITFIELD's string ends at its last
        fields = sorted({cell_field(c) for q in queries
                         for c in sketch_cells(q, CONFIG.sketch_width, CONFIG.sketch_depth)})
        for slot in wanted:
            got = cache.counts(0, slot, fields)
            assert got == {f: store.get(slot, {}).get(f, 0.0) for f in fields}
        for window in (wanted, wanted[1:], wanted[-1:], []):  # a frequency window, parts of it, none
            assert cache.sums(0, window, fields) == {
                f: sum(store.get(slot, {}).get(f, 0.0) for slot in window) for f in fields}
        assert cache.missing(0, wanted) == []
        assert len(cache._slices[0]) <= CONFIG.frequency_slices + 1  # older slices dropped


def test_a_forgotten_partition_is_read_again_and_others_are_kept() -> None:
    cache = SketchCache(CONFIG)
    cache.load(0, 5, None, {b"0:1": b"3"})
    cache.load(1, 5, np.array([0, 4], dtype=">u4").tobytes())
    cache.forget(0)
    assert cache.missing(0, [5]) == [5] and cache.missing(1, [5]) == []
    cache.committed(0, {5: {"0:1": 1.0}})  # not held: nothing to keep (Redis has it, a load reads it)
    assert cache.missing(0, [5]) == [5]
    assert cache.counts(1, 5, ["0:1", "1:2"]) == {"0:1": 4.0, "1:2": 0.0}


def test_a_batch_that_needs_an_older_day_of_slices_keeps_both_until_it_is_done() -> None:
    cache = SketchCache(CONFIG)
    recent, old = [20, 21, 22, 23], [5, 6, 7, 8]  # an impression a day older than the others
    cache.prune(0, recent + old)
    for slot in cache.missing(0, recent + old):
        cache.load(0, slot, None, {b"0:1": str(slot).encode()})
    assert all(cache.counts(0, slot, ["0:1"]) == {"0:1": float(slot)} for slot in recent + old)
    cache.prune(0, recent)  # the next batch needs only the recent day: the old one goes
    assert cache.missing(0, old) == old and cache.missing(0, recent) == []
