"""The stream core with its state in a real Redis: the same numbers as in process, and redelivery-safe."""

from __future__ import annotations

import json
import math
import random
import uuid

import pytest
from redis.asyncio import Redis

from monitor.core.canary import CanaryConfig
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import (
    DEAD_LETTER,
    EARLY_SESSIONS_EVICTED,
    Counter,
    dead_letter,
    labels_dropped,
)
from monitor.core.stream.history import split_query
from monitor.core.stream.transition import AnnotationRequest
from monitor.store.batch import LayoutError
from monitor.store.memory import partition_of
from monitor.store.writer import RedisState
from tests.support.redis_runs import in_process, run_through_redis, with_query_labels
from tests.support.shared_grades import CONFIG as SHARED_CONFIG
from tests.support.shared_grades import brute_force, shared_stream
from tests.support.streams import impression, interleave, label, random_stream

pytestmark = pytest.mark.integration

CONFIG = StreamConfig(join_window=300, min_coverage=0.6, budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


@pytest.mark.parametrize(("partitions", "batch", "n_groups"), [(1, 1, 4), (3, 1, 4), (3, 40, 4), (9, 40, 4),
                                                             (5, 40, 1)])
async def test_redis_state_equals_in_process_and_ignores_redelivery(redis_url: str, partitions: int,
                                                                    batch: int, n_groups: int) -> None:
    """Also with several partitions to a group (9 in 4, 5 in 1): the groups' totals, added to in each
    partition's commit, read back as the sum over the partitions."""
    events = with_query_labels(interleave(random_stream(11, sessions=150)[0], random.Random(5)))
    events.append(("impressions", b"bad", b'{"type": "impression", "schema": 3}'))
    memory = in_process(events, CONFIG, partitions)
    expected = memory.snapshot()

    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}",
                           clock=lambda: None, groups=n_groups)
        await run_through_redis(state, events, partitions, redeliver=True, batch=batch)
        got = await state.snapshot()
        everything = [Deploy("canary_start", "any", -1e12)]  # a period from the start: every epoch read
        history = await state.history(everything, CanaryConfig(baseline_window=1.0))
    finally:
        await redis.aclose()

    assert got.watermark == expected.watermark
    assert set(got.windows) == set(expected.windows)
    for key, stats in expected.windows.items():
        for name, value in stats.items():
            assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
    assert {k: v for k, v in got.counters.items() if v} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v})
    assert expected.counters[dead_letter("unknown_schema")] == 1
    assert sum(s.get("sessions", 0.0) for s in expected.windows.values()) > 100

    # the canary history: the same epochs (whose sum is the net totals) and the same first/last sightings
    wanted = memory.history()
    assert history.seen == wanted.seen and {arm for arm, _ in wanted.seen} == {"plain", "canary"}
    assert set(history.epochs) == set(wanted.epochs) and len(wanted.epochs) > 1
    for index, groups in wanted.epochs.items():
        for group, stats in groups.items():
            assert history.epochs[index][group] == pytest.approx(stats, abs=1e-9), (index, group)
    # each query's DCG per epoch (the adjustment for query difficulty): the same, and summing to the epochs
    assert set(history.queries) == set(wanted.queries) and len(wanted.queries) > 1
    for index, keys in wanted.queries.items():
        assert set(history.queries[index]) == set(keys)
        for key, stats in keys.items():
            assert history.queries[index][key] == pytest.approx(stats, abs=1e-9), (index, key)
        by_group: dict[str, dict[str, float]] = {}
        for key, stats in keys.items():
            group = split_query(key)[0]
            for name, value in stats.items():
                by_group.setdefault(group, {}).setdefault(name, 0.0)
                by_group[group][name] += value
        for group, stats in by_group.items():
            plain = wanted.epochs[index][group]
            assert (stats["n"], stats["x"], stats["xx"]) == pytest.approx(
                (plain["sessions"], plain["dcg"], plain["dcg_sq"]), abs=1e-9)
    # the epochs' session statistics sum to the net totals; their impressions (every impression counted,
    # sampled or not: the canary's sample-ratio check) to the impressions counters; their sampled
    # sessions (what the verdicts' settled looks wait for) lie between the two
    summed, totals = wanted.totals(), expected.totals()
    assert set(totals) <= set(summed)
    for group, stats in summed.items():
        sessions = {name: value for name, value in stats.items() if name not in ("impressions", "sampled")}
        assert sessions == pytest.approx(totals.get(group, {}), abs=1e-9), group
        assert stats["impressions"] == expected.counters[Counter("impressions", group)], group
        # every scored session was sampled, and a sampled session is one impression
        assert stats.get("sessions", 0.0) <= stats.get("sampled", 0.0) <= stats["impressions"], group
    assert {c.group for c, n in expected.counters.items() if c.name == "impressions" and n} == set(summed)


async def test_a_judgments_budget_in_redis_samples_and_spends_as_in_process(redis_url: str) -> None:
    """budget_unit = "judgments" with a budget that binds, query judgments known before some sessions and
    early labels: the same sessions sampled, the same requests (only unjudged documents), the same
    spend in Redis's budget counters, the same numbers."""
    config = StreamConfig(join_window=300, min_coverage=0.6, budget_period=300, budget_unit="judgments",
                          budget={"head": 150, "torso": 100, "tail": 100})
    _, truth = random_stream(12, sessions=150)
    judged = [("annotations", f"q-{sid}".encode(), json.dumps(
        {"type": "annotation", "query": f"q-{sid}", "grades": [
            {"doc_id": doc, "grade": 2} for doc in truth[sid]["docs"][:30:n]]}).encode())
        for sid, n in (("s3", 1), ("s5", 2), ("s8", 1), ("s13", 3), ("s21", 1))]
    events = judged + interleave(random_stream(12, sessions=150)[0], random.Random(6))
    partitions = 3
    memory = in_process(events, config, partitions, prune_every=10**9)  # every period kept
    expected = memory.snapshot()

    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, config, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        requests = await run_through_redis(state, events, partitions, batch=40)
        got = await state.snapshot()
        spent = {}
        for partition in range(partitions):
            for key in await redis.keys(state.keys.p(partition, "bud", "*")):
                period = int(key.decode().rsplit(":", 1)[1])
                for bucket, used in (await redis.hgetall(key)).items():
                    spent[(partition, bucket.decode(), period)] = float(used)
    finally:
        await redis.aclose()

    def key(r: AnnotationRequest) -> tuple[str, tuple[str, ...], int, int, str]:
        return (r.session_id, tuple(r.docs), r.judged, r.k, r.bucket)

    assert sorted(map(key, requests)) == sorted(map(key, memory.requests))
    spent_in_memory = {(p, bucket, period): used for p, s in enumerate(memory.state)
                       for (bucket, period), used in s.budget.items()}
    assert spent == spent_in_memory
    for request in requests:  # only what had no grade: not its early labels, not its query's judgments
        shown = truth[request.session_id]["docs"][:config.k[request.bucket]]
        assert request.docs == [d for d in shown if d in request.docs] and request.judged + len(request.docs) == len(shown)
    # a query judgment and an impression of its query in one batch: Redis also fans the judgment out to
    # the session that already read it (harmless, counted as unchanged labels); every other counter agrees
    assert {k: v for k, v in got.counters.items() if v and k.name != "unchanged_labels"} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v and k.name != "unchanged_labels"})
    assert set(got.windows) == set(expected.windows)
    for window, stats in expected.windows.items():
        for name, value in stats.items():
            assert got.windows[window].get(name, 0.0) == pytest.approx(value, abs=1e-9), (window, name)
    impressions = sum(v for c, v in expected.counters.items() if c.name == "impressions")
    sampled = sum(v for c, v in expected.counters.items() if c.name == "sampled")
    requested = sum(v for c, v in expected.counters.items() if c.name == "judgments_requested")
    assert 0.2 * impressions < sampled < 0.8 * impressions  # the budget binds
    assert requested == sum(len(r.docs) for r in requests) == sum(spent.values())
    assert len(requests) < sampled  # fully judged sessions were scored without a request


def paced_stream(seed: int) -> list[tuple[str, bytes, bytes]]:
    """Bursty impressions over three budget periods of 10 minutes, several times the budget below: quiet
    spells and bursts within a second, a fifth without ``query_bucket`` (estimated from the sketch), some
    late by up to two minutes (into the previous period), re-deliveries, query judgments, and labels for
    some sessions (sampled or not)."""
    rng = random.Random(seed)
    events: list[tuple[str, bytes, bytes]] = []
    shown: list[tuple[str, list[str]]] = []
    ts = 1000.0 * 600.0
    while ts < 1003 * 600.0:
        ts += rng.expovariate(1 / 10.0)
        for _ in range(rng.choice([1, 1, 2, 30])):
            sid = f"p{len(shown)}"
            docs = [f"d{rng.randrange(60)}" for _ in range(rng.randint(2, 12))]
            docs = list(dict.fromkeys(docs))
            late = rng.uniform(0.0, 120.0) if rng.random() < 0.1 else 0.0
            bucket = rng.choice([None, "head", "torso", "tail", "head"])
            value = impression(sid, ts + rng.random() - late, docs, bucket, query=f"q{rng.randrange(25)}",
                               variant=rng.choice(["control", "canary"]))
            events.append(("impressions", sid.encode(), value))
            shown.append((sid, docs))
            if rng.random() < 0.05:
                events.append(("impressions", sid.encode(), value))  # a re-delivery
            if rng.random() < 0.3:
                seen, seen_docs = rng.choice(shown)
                events.append(("annotations", seen.encode(), label(seen, rng.choice(seen_docs), rng.randint(0, 3))))
        if rng.random() < 0.02:
            query = f"q{rng.randrange(25)}"
            events.append(("annotations", query.encode(), json.dumps(
                {"type": "annotation", "query": query, "grades": [{"doc_id": "d1", "grade": 3}]}).encode()))
    return events


@pytest.mark.parametrize(("partitions", "batch"), [(1, 1), (3, 40), (3, 400)])
async def test_a_paced_sessions_budget_in_redis_samples_and_spends_as_in_process(redis_url: str, partitions: int,
                                                                                batch: int) -> None:
    """The budget paced over its period, in sessions, binding: the writer's reads
    (``prefetch.sampled_queries``: the queries of exactly the impressions the batch will sample, found
    with the allowance at each impression's own time) and its steps sample the sessions the in-process
    core samples, spend the same per partition, bucket and period, and give the same numbers, in batches
    of any size."""
    config = StreamConfig(join_window=300, min_coverage=0.6, budget_period=600,
                          budget={"head": 60, "torso": 30, "tail": 30}, head_min_frequency=40.0,
                          torso_min_frequency=10.0)
    events = paced_stream(partitions + batch)
    memory = in_process(events, config, partitions, prune_every=10**9)  # every period kept
    expected = memory.snapshot()

    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, config, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}",
                           clock=lambda: None)
        requests = await run_through_redis(state, events, partitions, batch=batch)
        got = await state.snapshot()
        spent = {}
        for partition in range(partitions):
            for key in await redis.keys(state.keys.p(partition, "bud", "*")):
                period = int(key.decode().rsplit(":", 1)[1])
                for bucket, used in (await redis.hgetall(key)).items():
                    spent[(partition, bucket.decode(), period)] = float(used)
    finally:
        await redis.aclose()

    assert sorted(r.session_id for r in requests) == sorted(r.session_id for r in memory.requests)
    assert spent == {(p, bucket, period): used for p, s in enumerate(memory.state)
                     for (bucket, period), used in s.budget.items()}
    # Redis applies a batch's fan-outs and refreshes after the batch, so when a session was scored,
    # re-scored or expired may differ (test_shared_grades_in_redis_give_the_brute_force_numbers); the rest
    ignored = {"unchanged_labels", "shared_before_session", "scored", "expired", "rescored", "corrections"}
    assert {k: v for k, v in got.counters.items() if v and k.name not in ignored} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v and k.name not in ignored})
    for window, stats in expected.windows.items():
        for name, value in stats.items():
            if name != "join_lag":
                assert got.windows[window].get(name, 0.0) == pytest.approx(value, abs=1e-9), (window, name)
    impressions = sum(v for c, v in expected.counters.items() if c.name == "impressions")
    sampled = sum(v for c, v in expected.counters.items() if c.name == "sampled")
    assert 0.1 * impressions < sampled < 0.4 * impressions  # the budget binds
    for (_, bucket, _), used in spent.items():  # a hard cap: at most ceil(share)
        assert used <= math.ceil(config.budget[bucket] / partitions)


@pytest.mark.parametrize(("partitions", "batch"), [(1, 1), (3, 40)])
async def test_shared_grades_in_redis_give_the_brute_force_numbers(redis_url: str, partitions: int,
                                                                    batch: int) -> None:
    """Grades reused across sessions of a query (the query's ``shared`` hash, merged by the Lua script,
    refreshes fanned out to its sessions): the same numbers as in process and as the brute force, and
    the same annotation requests; a redelivery changes nothing."""
    config = SHARED_CONFIG
    events, truth = shared_stream(21, sessions=160)
    events = interleave(events, random.Random(8))
    memory = in_process(events, config, partitions)
    expected = memory.snapshot()

    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, config, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        requests = await run_through_redis(state, events, partitions, redeliver=True, batch=batch)
        got = await state.snapshot()
        stored = {key.decode() for key in await redis.keys(f"{state.prefix}:*:shared")}
    finally:
        await redis.aclose()

    assert len(stored) == len({s["query"] for s in truth.values() if s["own"]})  # one hash per graded query
    want = brute_force(truth, config)
    for group, totals in want.items():
        stats = got.windows[("all", group)]
        assert (stats.get("sessions", 0.0), stats.get("expired", 0.0)) == (totals["sessions"], totals["expired"])
        assert stats.get("dcg", 0.0) == pytest.approx(totals["dcg"], abs=1e-9)
        assert stats.get("ndcg", 0.0) == pytest.approx(totals["ndcg"], abs=1e-9)
    for key, stats in expected.windows.items():  # join lag depends on when refreshes came (docs/metrics.md)
        for name, value in stats.items():
            if name != "join_lag":
                assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
    # what each impression asked for depends on what was graded when it was processed, as in process
    assert sorted((r.session_id, tuple(r.docs), r.judged) for r in requests) == sorted(
        (r.session_id, tuple(r.docs), r.judged) for r in memory.requests)
    # Redis may refresh a session twice (its re-read and a writer's fan-out both saw a change), and applies
    # a batch's refreshes after the batch, so when a session was scored, re-scored or expired differs
    ignored = {"unchanged_labels", "shared_before_session", "scored", "expired", "rescored", "corrections"}
    assert {k: v for k, v in got.counters.items() if v and k.name not in ignored} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v and k.name not in ignored})


@pytest.mark.parametrize(("partitions", "batch"), [(2, 1), (2, 40)])
async def test_events_with_a_wrong_clock_are_dead_letters_in_redis_too(redis_url: str, partitions: int,
                                                                       batch: int) -> None:
    """Issue 15, defect 1, on real Redis: a 9999-12-31 impression and deploy and an impression older than
    state_ttl behind its partition are dead letters ts_out_of_range (in a batch with valid events too),
    and the numbers are those of the valid events alone, as in process."""
    from tests.support.clock_skew import CONFIG as SKEW_CONFIG
    from tests.support.clock_skew import hostile

    now = 1_800_000_000.0  # the wall clock (2027) of a stream in 2023
    events, _ = random_stream(4, sessions=150, start=1_700_000_000.0)
    mixed, count = hostile(events, 4)
    expected = in_process(events, SKEW_CONFIG, partitions, clock=now).snapshot()
    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, SKEW_CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}",
                           clock=lambda: now)
        await run_through_redis(state, mixed, partitions, batch=batch)
        got = await state.snapshot()
    finally:
        await redis.aclose()
    assert got.counters[dead_letter("ts_out_of_range")] == count
    assert {k: v for k, v in got.counters.items() if v and k.name != DEAD_LETTER} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v and k.name != DEAD_LETTER})
    assert set(got.windows) == set(expected.windows)
    for key, stats in expected.windows.items():
        for name, value in stats.items():
            assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)


async def feed(state: RedisState, events: list[tuple[str, bytes, bytes]], partitions: int) -> None:
    """``events`` one message per batch, in order, without closing anything at the end."""
    offsets: dict[tuple[int, str], int] = {}
    for topic, key, value in events:
        partition = partition_of(key, partitions)
        offset = offsets[(partition, topic)] = offsets.get((partition, topic), -1) + 1
        outcome = await state.handle(partition, topic, offset, value)
        for session_id, annotation in outcome.fan_out:
            await state.apply_event(partition_of(session_id.encode(), partitions), annotation)


@pytest.mark.parametrize("partitions", [2, 3])
async def test_a_quiet_partition_closes_in_redis_as_in_process(redis_url: str, partitions: int) -> None:
    """Issue 15, defect 3, on real Redis: ``close_quiet`` closes the quiet partition's due sessions by the
    others' event time minus idle_after, as the in-process pipeline does after each impression; its own
    watermark stays; the busy partitions have nothing to close; a second call closes nothing more."""
    from tests.support.quiet_flood import CONFIG as QUIET_CONFIG
    from tests.support.quiet_flood import quiet_stream, run

    events, quiet = quiet_stream(partitions)
    memory = run(events, partitions=partitions)
    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, QUIET_CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        await feed(state, events, partitions)
        before = await state.snapshot()
        closed = [await state.close_quiet(p) for p in range(partitions)]
        again = [await state.close_quiet(p) for p in range(partitions)]
        got = await state.snapshot()
        waiting, _ = await state.health()
        wm = float(await redis.hget(state.keys.p(0, "meta"), "wm"))
    finally:
        await redis.aclose()
    assert closed == [10] + [0] * (partitions - 1) and again == [0] * partitions
    assert wm == 1019.0 and waiting == sum(len(s.deadlines) for s in memory.state)
    expected = memory.snapshot()
    assert before.windows != expected.windows  # the closes changed the numbers ...
    assert set(got.windows) == set(expected.windows)  # ... to exactly the in-process ones
    for key, stats in expected.windows.items():
        for name, value in stats.items():
            assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
    assert {k: v for k, v in got.counters.items() if v} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v})
    assert len(quiet) == 20


@pytest.mark.parametrize("cap", [40, 10_000])
async def test_a_ghost_label_flood_in_redis_is_bounded_and_evicts_as_in_process(redis_url: str, cap: int) -> None:
    """Issue 15, defect 4, on real Redis: with max_early_sessions ``cap`` per partition, 3,000 labels for
    sessions never shown, mixed into a valid stream (whose own labels sometimes come before their
    impression), leave at most ``cap`` sessions' early labels per partition in Redis; the oldest are
    evicted first, every evicted grade counted, exactly as in process (one message per batch, the
    worker's smallest). Below the cap, the numbers are those of the valid stream alone; at 40 the flood
    evicts some valid sessions' early labels too (documented), the same ones in Redis as in process."""
    from tests.support.quiet_flood import ghost

    partitions = 2
    config = StreamConfig(join_window=300, min_coverage=0.6, max_early_sessions=cap,
                          budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
    events = interleave(random_stream(12, sessions=150)[0], random.Random(3))
    rng = random.Random(9)
    mixed = list(events)
    for i in range(3000):
        mixed.insert(rng.randrange(len(mixed) + 1), ghost(i))
    memory = in_process(mixed, config, partitions)
    alone = in_process(events, config, partitions)
    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, config, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        await run_through_redis(state, mixed, partitions)
        got = await state.snapshot()
        early_keys = [k async for k in redis.scan_iter(match=f"{state.prefix}:*:e:*", count=1000)]
        waiting = [await redis.zcard(state.keys.p(p, "early")) for p in range(partitions)]
    finally:
        await redis.aclose()
    expected = memory.snapshot()
    assert len(early_keys) <= partitions * cap and max(waiting) <= cap
    evicted = expected.counters.get(EARLY_SESSIONS_EVICTED, 0.0)
    assert evicted >= 3000 - partitions * cap
    assert got.counters.get(EARLY_SESSIONS_EVICTED, 0.0) == evicted
    assert {k: v for k, v in got.counters.items() if v} == pytest.approx(
        {k: v for k, v in expected.counters.items() if v})
    for key, stats in expected.windows.items():
        for name, value in stats.items():
            assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)
    if evicted:
        assert got.counters[labels_dropped("evicted")] == expected.counters[labels_dropped("evicted")]
        return
    for key, stats in alone.snapshot().windows.items():  # the valid stream's numbers, unchanged
        for name, value in stats.items():
            assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (key, name)


def latest_ts_scenarios() -> dict[str, list[tuple[str, bytes, bytes]]]:
    """The scenarios of tests/unit/test_latest_grade_wins.py: a correction then the old grade re-sent, in
    a session's own grades, its early labels and its query's judgments; a tie; grades without ts."""
    from tests.support.latest_grade import graded, judged, shown

    base = [graded("s1", "b", 1, 1.0), graded("s1", "c", 1, 1.0)]
    return {
        "own": [shown("s1"), *base, graded("s1", "a", 0, 100.0), graded("s1", "a", 3, 200.0),
                graded("s1", "a", 0, 100.0)],
        "correction first": [shown("s1"), *base, graded("s1", "a", 3, 200.0), graded("s1", "a", 0, 100.0)],
        "early": [graded("s1", "a", 3, 200.0), graded("s1", "a", 0, 100.0), *base, shown("s1"),
                  graded("s1", "a", 1, 150.0)],
        "tie": [shown("s1"), *base, graded("s1", "a", 3, 100.0), graded("s1", "a", 0, 100.0)],
        "no ts": [shown("s1"), *base, graded("s1", "a", 1, 200.0), graded("s1", "a", 3, None),
                  graded("s1", "a", 0, 100.0)],
        "query": [shown("s1", query="q"), judged("q", "b", 1, 100.0), judged("q", "c", 1, 100.0),
                  judged("q", "a", 3, 200.0), judged("q", "a", 0, 100.0), shown("s2", 1010.0, query="q"),
                  judged("q", "a", 1, 150.0)],
    }


@pytest.mark.parametrize("scenario", sorted(latest_ts_scenarios()))
@pytest.mark.parametrize(("partitions", "batch"), [(1, 1), (3, 1), (3, 40)])
async def test_the_latest_ts_wins_in_redis_as_in_process(redis_url: str, scenario: str, partitions: int,
                                                         batch: int) -> None:
    """A re-sent old grade does not undo its correction in Redis either: the same numbers and the same
    count of stale grades as in process, and a redelivery changes nothing."""
    from tests.support.latest_grade import CONFIG as TS_CONFIG

    events = latest_ts_scenarios()[scenario]
    expected = in_process(events, TS_CONFIG, partitions).snapshot()
    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, TS_CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        await run_through_redis(state, events, partitions, redeliver=True, batch=batch)
        got = await state.snapshot()
    finally:
        await redis.aclose()
    assert set(got.windows) == set(expected.windows)
    for key, stats in expected.windows.items():
        assert stats.get("sessions", 0.0) >= 1
        for name, value in stats.items():
            if name != "join_lag":
                assert got.windows[key].get(name, 0.0) == pytest.approx(value, abs=1e-9), (scenario, key, name)
    stale = {"own": 1, "correction first": 1, "early": 2, "tie": 0, "no ts": 1, "query": 2}[scenario]
    assert sum(v for c, v in expected.counters.items() if c.name == "stale_labels") == stale
    assert sum(v for c, v in got.counters.items() if c.name == "stale_labels") == stale


@pytest.mark.parametrize(("partitions", "batch"), [(1, 1), (3, 1), (3, 40)])
async def test_any_delivery_order_of_ts_grades_in_redis_gives_the_numbers_of_ts_order(
        redis_url: str, partitions: int, batch: int) -> None:
    from tests.support.latest_grade import CONFIG as TS_CONFIG
    from tests.support.latest_grade import aggregates, ts_stream

    impressions, in_ts_order = ts_stream(3)
    reference = aggregates(in_process([*impressions, *in_ts_order], TS_CONFIG, partitions))
    redis = Redis.from_url(redis_url)
    try:
        for seed in range(3):
            events = [*impressions, *in_ts_order]
            random.Random(seed).shuffle(events)
            state = RedisState(redis, TS_CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
            await run_through_redis(state, events, partitions, batch=batch)
            got = await state.snapshot()
            assert {key: {name: round(value, 6) for name, value in stats.items() if name != "join_lag" and value}
                    for key, stats in got.windows.items()} == {
                key: {name: value for name, value in stats.items() if value} for key, stats in reference.items()}
    finally:
        await redis.aclose()


async def test_query_merge_is_idempotent_and_old_early_labels_stay_readable(redis_url: str) -> None:
    """The query's merge script redone (a crash between it and the partition's commit) changes nothing,
    an older grade loses to it; early labels and records stored before the ts was kept still read."""
    from monitor.core.stream.session import SessionRecord, query_key
    from tests.support.latest_grade import CONFIG as TS_CONFIG
    from tests.support.latest_grade import graded, shown

    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, TS_CONFIG, FOUR_LEVEL_SCALE, 1, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        keys = [state.keys.q(query_key("q"), "labels"), state.keys.q(query_key("q"), "label_ts")]
        assert await state.scripts.query_merge(keys=keys, args=[repr(200.0), 60, "a", 3, "b", 1]) == [b"a", b"b"]
        assert await state.scripts.query_merge(keys=keys, args=[repr(200.0), 60, "a", 3, "b", 1]) == [b"a", b"b"]
        assert await state.scripts.query_merge(keys=keys, args=[repr(100.0), 60, "a", 0]) == []
        assert await state.scripts.query_merge(keys=keys, args=["", 60, "b", 2]) == [b"b"]  # no ts: delivery
        assert await state.scripts.query_merge(keys=keys, args=[repr(150.0), 60, "b", 0]) == []  # held ts stays
        assert await redis.hgetall(keys[0]) == {b"a": b"3", b"b": b"2"}
        assert await redis.hgetall(keys[1]) == {b"a": b"200.0", b"b": b"200.0"}

        # stored by an older worker: early labels as a plain mapping, a record without the stamps
        await redis.set(state.keys.p(0, "e", "s1"), json.dumps({"a": 3, "b": 1}))
        old = SessionRecord("s2", query_key("q-s2"), "tail", "r1", "control", 1000.0, 3, ["a", "b", "c"],
                            [3.0, 2.0, 1.0], 1300.0, labels={"a": 3, "b": 1})
        await redis.set(state.keys.p(0, "s", "s2"), old.to_json())
        assert b"label_ts" not in old.to_json()
        for offset, (topic, _, value) in enumerate([shown("s1"), graded("s1", "c", 1, 5.0),
                                                    graded("s2", "c", 1, 5.0), graded("s2", "a", 0, 1.0)]):
            await state.handle(0, topic, offset, value)
        await state.advance(math.inf)
        got = await state.snapshot()
        record = SessionRecord.from_json(await redis.get(state.keys.p(0, "s", "s2")))
    finally:
        await redis.aclose()
    assert record.labels == {"a": 0, "b": 1, "c": 1}  # a held grade without ts: a ts'd one replaces it
    assert record.label_ts == {"a": 1.0, "c": 5.0}
    assert got.windows[("all", "tail|r1|control")]["sessions"] == 2


async def test_deploys_keep_their_share_in_redis_and_old_records_still_read(redis_url: str) -> None:
    """A deploy's ``share`` is recorded with it (only when declared: a record without one is written as
    before) and read back; a record stored before ``share`` existed reads with none."""
    sent = [Deploy("deploy", "r1", 10.0), Deploy("canary_start", "r2", 20.0, "r1", share=0.05),
            Deploy("canary_share", "r2", 30.0, share=0.25), Deploy("canary_start", "r3", 40.0, "r1"),
            Deploy("canary_share", "r3", 50.0, "r1", share=0.5), Deploy("rollback", "r3", 60.0)]
    redis = Redis.from_url(redis_url)
    try:
        state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, 1, prefix=f"test-{uuid.uuid4().hex[:8]}", clock=lambda: None)
        for offset, d in enumerate(sent):
            body = {"type": "deploy", "kind": d.kind, "ranker": d.ranker, "ts": d.ts}
            body.update({k: v for k, v in (("previous", d.previous), ("share", d.share)) if v is not None})
            await state.handle(0, "deploys", offset, json.dumps(body).encode())
        stored = [json.loads(raw) for raw in await redis.lrange(state.keys.t(0, "deploys"), 0, -1)]
        await redis.rpush(state.keys.t(0, "deploys"), json.dumps(
            {"kind": "canary_end", "ranker": "r2", "previous": None, "ts": 70.0}))  # as an older worker wrote
        got = await state.deploys()
    finally:
        await redis.aclose()
    assert [("share" in record, record.get("share")) for record in stored] == [
        (False, None), (True, 0.05), (True, 0.25), (False, None), (True, 0.5), (False, None)]
    assert got == [*sent, Deploy("canary_end", "r2", 70.0)]


async def test_a_worker_refuses_state_laid_out_in_other_groups_or_before_groups(redis_url: str) -> None:
    """Every worker of a deployment must lay the partitions out in the same groups (what the rollup sums);
    one started with another number, or on state written before groups (``{p<N>}`` keys), refuses before
    it writes anything, and says why."""
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    shown = json.dumps({"type": "impression", "session_id": "s1", "query": "q", "ranker": "r1",
                        "ts": 1000.0, "docs": ["a", "b"], "query_bucket": "tail"}).encode()
    redis = Redis.from_url(redis_url)
    try:
        first = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, 8, prefix=prefix, clock=lambda: None, groups=4)
        await first.handle(5, "impressions", 0, shown)
        assert await redis.hget(first.keys.layout, "groups") == b"4"
        other = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, 8, prefix=prefix, clock=lambda: None, groups=2)
        with pytest.raises(LayoutError, match=r"laid out in 4 groups.*MONITOR_REDIS_GROUPS=2"):
            await other.handle(6, "impressions", 0, shown)
        assert not await redis.exists(other.keys.p(6, "meta"))  # nothing written
        same = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, 8, prefix=prefix, clock=lambda: None, groups=4)
        await same.handle(6, "impressions", 0, shown)  # a second worker with the same layout goes on

        old = f"{prefix}-old"
        await redis.sadd(f"{old}:partitions", 3)
        await redis.hset(f"{old}:{{p3}}:meta", "wm", "1000.0")  # as a version before groups wrote it
        upgraded = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, 8, prefix=old, clock=lambda: None)
        with pytest.raises(LayoutError, match=r"before partitions were grouped.*partitions \[3\].*PREFIX"):
            await upgraded.handle(3, "impressions", 0, shown)
        assert not await redis.exists(upgraded.keys.layout)  # refused again on the next start, not recorded
    finally:
        await redis.aclose()
