"""A partition's sketch read as window sums (the Redis path) estimates buckets as the slices themselves do."""

from __future__ import annotations

import random

from monitor.core.events import Impression, Result
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.join import frequency_slices
from monitor.core.stream.lean import frequency_fields
from monitor.store.partition_state import PartitionState

CONFIG = StreamConfig(head_min_frequency=30.0, torso_min_frequency=8.0,
                      budget={"head": 0.0, "torso": 0.0, "tail": 0.0})


def test_window_sums_and_the_batchs_own_increments_give_the_buckets_of_the_slices() -> None:
    rng = random.Random(3)
    width = CONFIG.frequency_window / CONFIG.frequency_slices
    queries = [f"q{i}" for i in range(200)]
    slices: dict[int, dict[str, float]] = {}  # what earlier batches counted, slice by slice
    start = 100_000 * width
    for _ in range(1000):
        query = rng.choice(queries[:10]) if rng.random() < 0.7 else rng.choice(queries)
        index = int(start / width) - rng.randrange(30)
        for name in frequency_fields(query, CONFIG):
            slices.setdefault(index, {})[name] = slices.get(index, {}).get(name, 0.0) + 1.0
    events = [Impression(f"s{i}", rng.choice(queries), "r", start + i * 7.0, (Result("d", 1),))
              for i in range(600)]  # over a slice boundary: two windows
    windows = {frequency_slices(e.ts, CONFIG) for e in events}
    assert len(windows) == 2
    by_slices = PartitionState(sketch={i: dict(c) for i, c in slices.items()})
    by_sums = PartitionState(windows={w: {name: sum(slices.get(i, {}).get(name, 0.0) for i in w)
                                          for q in queries for name in frequency_fields(q, CONFIG)}
                                      for w in windows})
    got = [(by_slices.count_only(e, CONFIG, 4), by_sums.count_only(e, CONFIG, 4)) for e in events]
    assert all(a == b for a, b in got)
    assert {a.bucket for a, _ in got if a is not None} == {"head", "torso", "tail"}
