"""Shadow lists on real Redis (issue 28, item 1): a stream whose impressions carry a declared and an
undeclared shadow list counts the undeclared lists in Redis as in process (``undeclared{reason=
"shadow_ranker"}``), never a dead letter, and every other number in Redis is that of the same stream
without shadow lists, batched alike (the in-process comparison is tests/unit/test_shadow_events.py)."""

from __future__ import annotations

import math
import uuid

import pytest
from redis.asyncio import Redis

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import SHADOW_RANKER
from monitor.core.stream.snapshot import Snapshot
from monitor.sim import SimConfig, simulate
from monitor.store.memory import MemoryPipeline
from monitor.store.writer import RedisState
from tests.support.redis_runs import run_through_redis
from tests.support.shadow import Events, with_shadow

pytestmark = pytest.mark.integration
PARTITIONS = 2
CONFIG = StreamConfig(ranker_pattern="ranker-[a-z]", budget={"head": 60.0, "torso": 40.0, "tail": 40.0})


def in_process(events: Events) -> MemoryPipeline:
    pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=PARTITIONS, clock=lambda: None)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)
    return pipeline


async def through_redis(redis: Redis, events: Events) -> Snapshot:
    state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, PARTITIONS, prefix=f"test-{uuid.uuid4().hex[:8]}",
                       clock=lambda: None)
    await run_through_redis(state, events, PARTITIONS, batch=50)
    return await state.snapshot()


async def test_undeclared_shadow_lists_are_counted_in_redis_as_in_process(redis_url: str) -> None:
    plain = [(e.topic, e.key, e.value) for e in simulate(SimConfig(seed=4, n_sessions=250)).events]
    shadowed = with_shadow(plain)
    impressions = sum(topic == "impressions" for topic, _, _ in plain)
    redis = Redis.from_url(redis_url)
    try:
        got = await through_redis(redis, shadowed)
        without = await through_redis(redis, plain)
    finally:
        await redis.aclose()

    assert got.counters.get(SHADOW_RANKER) == impressions  # cand-9 on every impression, ranker-z declared
    assert in_process(shadowed).snapshot().counters.get(SHADOW_RANKER) == impressions
    assert SHADOW_RANKER not in without.counters
    assert {c: v for c, v in got.counters.items() if c != SHADOW_RANKER} == without.counters
    assert got.totals() == without.totals() and got.windows == without.windows
