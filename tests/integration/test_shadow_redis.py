"""Shadow lists on real Redis (issue 28, items 1 and 2): a stream whose impressions carry a declared and an
undeclared shadow list counts the undeclared lists in Redis as in process (``undeclared{reason=
"shadow_ranker"}``), never a dead letter; Redis and the in-process store agree on every number, the paired
groups (``bucket|candidate|shadow``) and their requests included; and every served number in Redis is that
of the same stream without shadow lists, batched alike (the in-process comparisons are
tests/unit/test_shadow_events.py and tests/unit/test_shadow_join.py)."""

from __future__ import annotations

import math
import uuid

import pytest
from redis.asyncio import Redis

from monitor.core.canary import CanaryConfig, comparisons, first_epoch
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import SHADOW_RANKER, Counter
from monitor.core.stream.history import History
from monitor.core.stream.snapshot import Snapshot
from monitor.core.stream.transition import AnnotationRequest
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


async def through_redis(redis: Redis, events: Events) -> tuple[Snapshot, list[AnnotationRequest], History]:
    """The snapshot, the requests and the canary's history (no deploy event) of ``events`` in Redis."""
    state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, PARTITIONS, prefix=f"test-{uuid.uuid4().hex[:8]}",
                       clock=lambda: None)
    requests = await run_through_redis(state, events, PARTITIONS, batch=50)
    return await state.snapshot(), requests, await state.history([], CanaryConfig())


ASKED = {"judgments_requested", "judgments_received", "judgments_top_k", "shadow_scored"}


def mine_differs(redis: Snapshot, local: Snapshot) -> dict[Counter, tuple[float, float]]:
    """The counters whose value in Redis is not that of the in-process store."""
    return {c: (redis.counters.get(c, 0.0), local.counters.get(c, 0.0)) for c in {*redis.counters, *local.counters}
            if redis.counters.get(c, 0.0) != local.counters.get(c, 0.0)}


def served_counters(snapshot: Snapshot) -> dict[Counter, float]:
    """The counters but the undeclared shadow lists', the paired ones and those of what requests ask (over
    the union of the served and shadow top k)."""
    return {c: v for c, v in snapshot.counters.items() if c != SHADOW_RANKER and c.name not in ASKED}


async def test_shadow_lists_in_redis_give_the_in_process_numbers_and_the_served_ones_unchanged(redis_url: str) -> None:
    plain = [(e.topic, e.key, e.value) for e in simulate(SimConfig(seed=4, n_sessions=250)).events]
    shadowed = with_shadow(plain)
    impressions = sum(topic == "impressions" for topic, _, _ in plain)
    redis = Redis.from_url(redis_url)
    try:
        got, asked, history = await through_redis(redis, shadowed)
        without, _, _ = await through_redis(redis, plain)
    finally:
        await redis.aclose()

    assert got.counters.get(SHADOW_RANKER) == impressions  # cand-9 on every impression, ranker-z declared
    local = in_process(shadowed)
    assert local.snapshot().counters.get(SHADOW_RANKER) == impressions
    assert SHADOW_RANKER not in without.counters
    # Redis and in process: the same numbers, paired groups and requests included (as in
    # test_redis_state.py: float sums to 1e-9, the batches of 50 order re-scores differently; join_lag and
    # the counters rescored and unchanged_labels depend on how labels interleave with impressions: they
    # differ as they do without shadow lists)
    mine = local.snapshot()
    assert got.windows.keys() == mine.windows.keys()
    for key, stats in mine.windows.items():
        assert {n: v for n, v in got.windows[key].items() if n != "join_lag"} == pytest.approx(
            {n: v for n, v in stats.items() if n != "join_lag"}, abs=1e-9), key
    assert any(g.endswith("|shadow") for _, g in mine.windows)
    assert mine_differs(got, mine) == mine_differs(without, in_process(plain).snapshot())
    assert sorted(asked, key=lambda r: r.session_id) == sorted(local.requests, key=lambda r: r.session_id)
    paired = {g for g in got.totals() if g.endswith("|shadow")}
    assert paired and {g.split("|")[1] for g in paired} == {"ranker-z"}
    assert sum(got.totals()[g]["pair_n"] for g in paired) > 0
    assert sum(v for c, v in got.counters.items() if c.name == "shadow_scored") > 0
    # the served numbers: those of the stream without shadow lists
    assert served_counters(got) == served_counters(without)
    assert {g: s for g, s in got.totals().items() if g not in paired} == without.totals()
    assert {key: s for key, s in got.windows.items() if key[1] not in paired} == without.windows
    # the canary's reader finds the shadow candidate by its sightings, as in process, even with no canary
    # or deploy to start the history from, and judges it on the epochs it read
    sighted = history.seen.get(("shadow", "ranker-z"))
    assert sighted is not None and sighted == local.history().seen[("shadow", "ranker-z")]
    alone = History(history.width, {}, {("shadow", "ranker-z"): sighted})
    assert first_epoch(alone, [], CanaryConfig()) is not None
    assert {c.candidate for c in comparisons(history, [], CanaryConfig()) if c.kind == "shadow"} == {"ranker-z"}
