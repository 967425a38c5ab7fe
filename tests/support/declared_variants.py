"""Streams over declared variants mixed with junk, and the in-process run over them."""

from __future__ import annotations

import json
import math
import random

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.store.memory import MemoryPipeline, partition_of

Events = list[tuple[str, bytes, bytes]]
PARTITIONS = 2
JUNK = 5000
# small enough that the budget binds (the simulated hour has 3,000 sessions): junk that spent it would show
BUDGET = {"head": 300.0, "torso": 200.0, "tail": 200.0}
DECLARED = StreamConfig(budget=BUDGET, ranker_pattern="ranker-[a-z]", join_window=1800)


def with_junk(events: Events, seed: int, count: int = JUNK) -> Events:
    """``events`` with ``count`` junk impressions mixed in: half with a distinct undeclared variant
    (``exp-<i>``, a real ranker), half with a distinct ranker outside the pattern (``junk-<i>``, variant
    control). Each copies the query, results and time of the latest real impression of its partition
    before it, so it moves no watermark (the numbers of the real sessions may then be compared exactly)."""
    rng = random.Random(seed)
    impressions = [json.loads(v) for t, _, v in events if t == "impressions"]
    queries = sorted({i["query"] for i in impressions})
    slots = sorted(rng.randrange(len(events) // 100, len(events) + 1) for _ in range(count))
    out: Events = []
    latest: dict[int, dict[str, object]] = {}
    junk = 0
    at = 0
    for index in range(len(events) + 1):
        while at < len(slots) and slots[at] == index:
            at += 1
            sid = f"junk-{junk}"
            partition = partition_of(sid.encode(), PARTITIONS)
            base = latest.get(partition) or latest[next(iter(latest))]
            if partition not in latest:  # nothing on its partition yet: the earliest time seen, no later
                base = {**base, "ts": min(float(str(b["ts"])) for b in latest.values())}
            body = {"type": "impression", "session_id": sid, "query": rng.choice(queries),
                    "results": base["results"], "ts": base["ts"]}
            if junk % 2 == 0:
                body.update(ranker="ranker-a", variant=f"exp-{junk}")
            else:
                body.update(ranker=f"junk-{junk}", variant="control")
            out.append(("impressions", sid.encode(), json.dumps(body).encode()))
            junk += 1
        if index < len(events):
            topic, key, value = events[index]
            out.append((topic, key, value))
            if topic == "impressions":
                body = json.loads(value)
                latest[partition_of(body["session_id"].encode(), PARTITIONS)] = body
    assert junk == count
    return out


def run(events: Events, config: StreamConfig) -> MemoryPipeline:
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=PARTITIONS, prune_every=10**9, clock=lambda: None)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)
    return pipeline


DEAD_LETTER = StreamConfig(budget=BUDGET, ranker_pattern="ranker-[a-z]", join_window=1800,
                           undeclared="dead_letter")
