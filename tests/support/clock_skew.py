"""Streams with hostile (skewed, far-future) event clocks."""

from __future__ import annotations

import json
import random

from monitor.core.stream.config import StreamConfig
from tests.support.streams import impression

CONFIG = StreamConfig(join_window=300, state_ttl=600, min_coverage=0.5,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
FAR_FUTURE = 253_402_214_400.0  # 9999-12-31
Events = list[tuple[str, bytes, bytes]]


def hostile(events: Events, seed: int) -> tuple[Events, int]:
    """``events`` with, in the middle: an impression dated 9999-12-31, a deploy dated then too, and an
    impression two state_ttl older than the events around it; how many were mixed in."""
    rng = random.Random(seed)
    middle = len(events) // 2
    last = max(json.loads(value)["ts"] for topic, _, value in events if topic == "impressions")
    bad = [
        ("impressions", b"future", impression("future", FAR_FUTURE, ["f-a", "f-b"], "head")),
        ("deploys", b"r9", json.dumps({"type": "deploy", "kind": "deploy", "ranker": "r9", "previous": "r1",
                                       "ts": FAR_FUTURE}).encode()),
    ]
    out = list(events)
    for i, event in enumerate(bad):
        out.insert(middle + i * rng.randint(1, 5), event)
    # far in the past of its partition: after the whole stream (the watermark is then the latest time)
    out.append(("impressions", b"past", impression("past", last - 3 * CONFIG.state_ttl, ["p-a"], "tail")))
    return out, len(bad) + 1
