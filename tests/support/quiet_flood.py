"""Streams with quiet and flooded partitions, and the in-process run over them."""

from __future__ import annotations

import json
import math

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.partition import partition_for
from monitor.store.memory import MemoryPipeline
from tests.support.streams import impression, label

CONFIG = StreamConfig(join_window=300, state_ttl=3000, min_coverage=0.5, idle_after=600,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
Events = list[tuple[str, bytes, bytes]]


def sid_on(partition: int, partitions: int, prefix: str, count: int) -> list[str]:
    """``count`` session ids that Kafka's partitioner puts on ``partition``."""
    out, i = [], 0
    while len(out) < count:
        sid = f"{prefix}{i}"
        if partition_for(sid.encode(), partitions) == partition:
            out.append(sid)
        i += 1
    return out


def quiet_stream(partitions: int = 2, base: float = 0.0) -> tuple[Events, list[str]]:
    """Partition 0 gets 20 sessions (half labelled, half not), then nothing; the other partitions get a
    session every 30 s for two hours, all labelled. Returns the events and partition 0's sessions. Event
    times start at ``base`` + 1000 s: toy times for a core without a wall clock; a worker (whose clock
    refuses times before 2000) needs a real ``base``."""
    events: Events = []
    quiet = sid_on(0, partitions, "quiet-", 20)
    for i, sid in enumerate(quiet):
        events.append(("impressions", sid.encode(), impression(sid, base + 1000.0 + i, ["a", "b"])))
        if i % 2 == 0:
            events.append(("annotations", sid.encode(), label(sid, "a", 3)))
            events.append(("annotations", sid.encode(), label(sid, "b", 1)))
    busy = [s for p in range(1, partitions) for s in sid_on(p, partitions, f"busy{p}-", 240)]
    for i, sid in enumerate(sorted(busy, key=lambda s: (int(s.split("-")[1]), s))):
        ts = base + 1100.0 + 30.0 * (i // (partitions - 1))
        events.append(("impressions", sid.encode(), impression(sid, ts, ["c", "d"])))
        events.append(("annotations", sid.encode(), label(sid, "c", 2)))
        events.append(("annotations", sid.encode(), label(sid, "d", 0)))
    return events, quiet


def run(events: Events, config: StreamConfig = CONFIG, partitions: int = 2, end: bool = False,
        prune_every: int = 1000) -> MemoryPipeline:
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, clock=lambda: None,
                              prune_every=prune_every)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    if end:
        pipeline.advance(math.inf)
    return pipeline


def ghost(i: int) -> tuple[str, bytes, bytes]:
    sid = f"ghost-{i}"
    value = json.dumps({"type": "annotation", "session_id": sid,
                        "grades": [{"doc_id": f"g{j}", "grade": "高"} for j in range(2)]}).encode()
    return "annotations", sid.encode(), value
