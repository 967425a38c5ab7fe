"""Issue 15, part 5, on real Redis: a simulated stream with junk-variant and junk-ranker impressions mixed in
gives in Redis what it gives in process, counted as other or dead-lettered as configured, and the real
traffic's numbers are those of the stream without the junk. (The stream of tests/unit/test_declared_variants.py
at a third of its size: 1,000 sessions and 2,000 junk impressions, so that each mode takes one to two minutes.)"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest
from redis.asyncio import Redis

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.counters import DEAD_LETTER as DEAD_LETTER_COUNTER
from monitor.core.stream.counters import UNDECLARED, Counter, dead_letter, undeclared
from monitor.sim import SimConfig, simulate
from monitor.store.admitting import MAX_UNDECLARED_NAMED
from monitor.store.writer import RedisState
from tests.support.declared_variants import DEAD_LETTER, DECLARED, PARTITIONS, Events, run, with_junk
from tests.support.redis_runs import run_through_redis

pytestmark = pytest.mark.integration
JUNK = 2000


@pytest.fixture(scope="module")
def streams() -> tuple[Events, Events]:
    events = [(e.topic, e.key, e.value) for e in simulate(SimConfig(seed=3, n_sessions=1000)).events]
    return events, with_junk(events, 3, JUNK)


ORDER_DEPENDENT = ("unchanged_labels", "rescored")


def comparable(counters: Mapping[Counter, float]) -> dict[Counter, float]:
    # Redis applies a query judgment's fan-out after its batch, in process at once: a session of the
    # batch that already read the judgment gets it again (unchanged labels, see test_redis_state.py), and
    # on this stream one session is scored twice in process but once in Redis (rescored 911 against 910,
    # without any junk too); every other counter must agree
    return {k: v for k, v in counters.items() if v and k.name not in ORDER_DEPENDENT}


@pytest.mark.parametrize("mode", ["other", "dead_letter"])
async def test_junk_in_redis_as_in_process(redis_url: str, streams: tuple[Events, Events], mode: str) -> None:
    config = DECLARED if mode == "other" else DEAD_LETTER
    clean_events, dirty_events = streams
    memory = run(dirty_events, config)
    expected = memory.snapshot()
    clean = run(clean_events, config).snapshot()
    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, config, FOUR_LEVEL_SCALE, PARTITIONS, prefix=f"test-{uuid.uuid4().hex[:8]}",
                           clock=lambda: None)
        requests = await run_through_redis(state, dirty_events, PARTITIONS, batch=100)
        got = await state.snapshot()
    finally:
        await redis.aclose()

    assert comparable(got.counters) == pytest.approx(comparable(expected.counters))
    if mode == "other":
        assert got.counters[undeclared("variant")] == got.counters[undeclared("ranker")] == JUNK / 2
        # each junk value is named once, for the worker's log: the first MAX_UNDECLARED_NAMED of them
        assert len(state.undeclared_new) == len(set(state.undeclared_new)) == MAX_UNDECLARED_NAMED
        assert {reason for reason, _ in state.undeclared_new} == {"variant", "ranker"}
        assert all(value.startswith("exp-" if reason == "variant" else "junk-")
                   for reason, value in state.undeclared_new)
    else:
        assert state.undeclared_new == []  # dead letters: named by the dead-letter topic
    if mode == "dead_letter":
        assert got.counters[dead_letter("undeclared_variant")] == JUNK / 2
        assert got.counters[dead_letter("undeclared_ranker")] == JUNK / 2
    real = {k: v for k, v in comparable(got.counters).items()
            if k.name not in (UNDECLARED, DEAD_LETTER_COUNTER) and "other" not in k.group.split("|")}
    assert real == pytest.approx(comparable(clean.counters))
    assert 200 < sum(v for c, v in real.items() if c.name == "sampled") < 900  # the budget binds
    assert sorted(r.session_id for r in requests) == sorted(r.session_id for r in memory.requests)
    assert not any(r.session_id.startswith("junk-") for r in requests)
    # join_lag is left out: a session's scoring time is its partition's event time when it is scored, which
    # depends on how messages are batched (it differs between Redis and in process without junk too)
    for reference in (expected, clean):
        assert set(got.windows) == set(reference.windows)
        for key, stats in reference.windows.items():
            for name, value in stats.items():
                if name != "join_lag":
                    assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
