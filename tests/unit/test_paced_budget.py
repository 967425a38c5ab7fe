"""The annotation budget paced in event time (monitor/core/stream/sampling.py).

Each partition's share of a bucket's budget, ``share = budget / partitions`` per period, fills like a
token bucket at ``share`` per period with one unit of burst: an impression at ``ts``, a fraction
``elapsed`` into its period, is sampled while its partition's spend for its bucket in that period is below
``min(share, share · elapsed + 1)``. Before, an impression was sampled while the spend was below ``share``
(first come): with traffic far above the budget every labelled session of an hour came from its first
minutes. Here: the allowance itself; through the stream core, a hard cap, an even spread over the hour,
a deploy measured within minutes, traffic below the budget all taken when spread (not a burst at the
period's start), unused budget lost at the period's end; and a decision that reads only the bucket, the
time and the spend.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.events import Impression, Result
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.join import step
from monitor.core.stream.sampling import allowance, budget_period, may_sample, sampled_by
from monitor.core.stream.transition import Loaded
from monitor.store.memory import MemoryPipeline, partition_of
from monitor.store.partition_state import PartitionState
from tests.support.streams import impression

HOUR = 1_763_712_000.0  # 2025-11-21 08:00 UTC: the start of a budget period of an hour
BUCKETS = ("head", "torso", "tail")
PARTITIONS = 4


def run(events: list[tuple[str, float, str, str]], config: StreamConfig, partitions: int = PARTITIONS,
        docs: int = 3) -> MemoryPipeline:
    """(session, ts, bucket, ranker) impressions, in order, through the in-process core."""
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, prune_every=10**9,
                              clock=lambda: None)
    for sid, ts, bucket, ranker in events:
        pipeline.submit("impressions", sid.encode(),
                        impression(sid, ts, [f"{sid}-{j}" for j in range(docs)], bucket, ranker=ranker))
    return pipeline


def sampled_records(pipeline: MemoryPipeline) -> list[tuple[float, str, str]]:
    """(ts, bucket, ranker) of every sampled session."""
    return sorted((r.ts, r.bucket, r.ranker) for state in pipeline.state for r in state.records.values())


def uniform_traffic(rng: random.Random, per_bucket: int, start: float, seconds: float,
                    prefix: str) -> list[tuple[str, float, str, str]]:
    """``per_bucket`` impressions of each bucket at uniform random times in [start, start + seconds)."""
    events = [(f"{prefix}{b}{i}", start + rng.random() * seconds, b, "r1")
              for b in BUCKETS for i in range(per_bucket)]
    return sorted(events, key=lambda e: e[1])


# --- the allowance ----------------------------------------------------------------------------------------

CONFIG = StreamConfig(budget={"head": 400.0, "torso": 2.0, "tail": 0.0}, budget_period=3600.0)


@pytest.mark.parametrize(("bucket", "ts", "want"), [
    ("head", 7200.0, 1.0),             # a period's start: one unit of burst, whatever the share (100)
    ("head", 7200.0 + 36.0, 2.0),      # 1% of the period: 100 · 0.01 + 1
    ("head", 7200.0 + 900.0, 26.0),    # a quarter: 100 · 0.25 + 1
    ("head", 7200.0 + 3564.0, 100.0),  # 99%: 100 · 0.99 + 1 = 100 (the share, which caps it from there)
    ("head", 7200.0 + 3599.0, 100.0),  # the cap: never more than the share
    ("head", 10800.0, 1.0),            # the next period starts again from the burst
    ("torso", 1800.0, 0.5),            # a share below one (2 / 4): the share, all period long
    ("tail", 1800.0, 0.0),             # no budget: never
])
def test_the_allowance_is_the_share_paced_over_the_period(bucket: str, ts: float, want: float) -> None:
    assert allowance(bucket, ts, CONFIG, PARTITIONS) == pytest.approx(want, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(budget=st.floats(0.0, 1e6), partitions=st.integers(1, 64), period=st.floats(1.0, 86400.0),
       ts=st.floats(946_684_800.0, 4e9), later=st.floats(0.0, 1.0))
def test_the_allowance_grows_within_a_period_up_to_the_share(budget: float, partitions: int, period: float,
                                                             ts: float, later: float) -> None:
    config = StreamConfig(budget={"head": budget, "torso": 0.0, "tail": 0.0}, budget_period=period)
    share = budget / partitions
    start = budget_period(ts, config) * period
    end = start + period * (1.0 - 1e-9)
    after = ts + (end - ts) * later  # a later time of the same period
    a, b = allowance("head", ts, config, partitions), allowance("head", after, config, partitions)
    assert a <= share and b <= share  # a hard cap
    assert a >= min(share, 1.0) - 1e-9  # the burst: the first impression of a period is taken
    if budget_period(after, config) == budget_period(ts, config):
        assert b >= a - 1e-9 * max(1.0, share)  # it only grows within the period
    assert sampled_by("head", ts, 0.0, config, partitions) == (share > 0)


# --- through the stream core --------------------------------------------------------------------------

@pytest.mark.parametrize("unit", ["sessions", "judgments"])
@pytest.mark.parametrize("seed", range(4))
def test_the_spend_never_passes_the_share_by_more_than_today(seed: int, unit: str) -> None:
    """Bursty traffic (quiet minutes, then bursts of up to 300 impressions within seconds) over three
    hours: per partition, bucket and period the spend is at most ``ceil(share)`` sessions, or the share
    plus less than one session's cost in judgments; and each period's spend stays within the allowance
    at each sampled session's time."""
    rng = random.Random(seed)
    budget = {"head": 90.0, "torso": 30.0, "tail": 7.0}
    config = StreamConfig(budget=budget, budget_unit=unit)
    events: list[tuple[str, float, str, str]] = []
    ts = HOUR
    while ts < HOUR + 3 * 3600:
        ts += rng.expovariate(1 / 240.0)
        for i in range(rng.choice([1, 5, 50, 300])):
            events.append((f"s{len(events)}", ts + i * 0.01, rng.choice(BUCKETS), "r1"))
    pipeline = run(events, config, docs=rng.choice([3, 25]))
    sampled = Counter(budget_period(ts, config) for ts, _, _ in sampled_records(pipeline))
    assert len(sampled) >= 3 and sum(sampled.values()) < len(events) / 3  # the budget binds
    for partition, state in enumerate(pipeline.state):
        for (bucket, period), spent in state.budget.items():
            share = budget[bucket] / PARTITIONS
            if unit == "sessions":
                assert spent <= math.ceil(share), (partition, bucket, period)
            else:
                assert spent < share + config.k[bucket], (partition, bucket, period)
    # replayed per partition: every sampled session found the spend below the allowance at its ts
    spent_so_far: Counter[tuple[int, str, int]] = Counter()
    costs = {r.session_id: r for state in pipeline.state for r in state.records.values()}
    for sid, ts, bucket, _ in events:
        slot = (partition_of(sid.encode(), PARTITIONS), bucket, budget_period(ts, config))
        if sid in costs:
            assert spent_so_far[slot] < allowance(bucket, ts, config, PARTITIONS), sid
            assert spent_so_far[slot] < budget[bucket] / PARTITIONS, sid  # the cap, read from the budget
            spent_so_far[slot] += 1.0 if unit == "sessions" else len(costs[sid].docs)
        else:
            assert spent_so_far[slot] >= allowance(bucket, ts, config, PARTITIONS), sid


def test_traffic_at_ten_times_the_budget_is_sampled_evenly_over_the_hour() -> None:
    """Impressions uniform in time at 10× the budget, 4 partitions: each 15-minute epoch of the hour gets
    25% ± 5% of the hour's sampled sessions (first come, the first epoch got them all), and the hour
    samples nearly the whole budget, never more."""
    budget = {"head": 120.0, "torso": 120.0, "tail": 120.0}
    config = StreamConfig(budget=budget)
    events = uniform_traffic(random.Random(7), 1200, HOUR, 3600.0, "s")
    records = sampled_records(run(events, config))
    assert 0.97 * sum(budget.values()) <= len(records) <= sum(budget.values())
    epochs = Counter(int((ts - HOUR) // 900) for ts, _, _ in records)
    assert sorted(epochs) == [0, 1, 2, 3]
    for epoch, count in epochs.items():
        assert 0.20 <= count / len(records) <= 0.30, (epoch, count, len(records))
    for bucket in BUCKETS:  # within each bucket too
        ours = [ts for ts, b, _ in records if b == bucket]
        halves = Counter(int((ts - HOUR) // 1800) for ts in ours)
        assert abs(halves[0] - halves[1]) <= 0.1 * len(ours), (bucket, halves)


def test_a_deploy_at_minute_five_is_sampled_within_the_quarter_hour() -> None:
    """A new ranker serves from 10:05 (event time) in traffic at 80× the budget: its sessions are sampled
    within minutes of the deploy and, from then on, at the budget's pace (first come, the hour's budget
    was spent on the old ranker in its first 45 seconds and the new one waited until 11:00)."""
    budget = {"head": 60.0, "torso": 0.0, "tail": 0.0}
    config = StreamConfig(budget=budget)
    rng = random.Random(3)
    deploy = HOUR + 300.0
    times = sorted(HOUR + rng.random() * 3600.0 for _ in range(80 * 60))
    events = [(f"s{i}", ts, "head", "r-old" if ts < deploy else "r-new") for i, ts in enumerate(times)]
    records = sampled_records(run(events, config))
    new = [ts for ts, _, ranker in records if ranker == "r-new"]
    assert new and new[0] < deploy + 240.0  # within a partition's interval between samples: 3600 / 15 s
    quarter = [ts for ts in new if ts < HOUR + 1200.0]  # 10:05 to 10:20: a quarter of the hour's budget
    assert 12 <= len(quarter) <= 18, len(quarter)
    assert all(ts >= deploy for ts in new) and all(ts < deploy for ts, _, r in records if r == "r-old")
    # the old rule on the same events: per partition, the first 15 of the hour, all of the old ranker
    first_come: Counter[int] = Counter()
    old_rule = []
    for sid, _, _, ranker in events:
        partition = partition_of(sid.encode(), PARTITIONS)
        if first_come[partition] < budget["head"] / PARTITIONS:
            first_come[partition] += 1
            old_rule.append(ranker)
    assert len(old_rule) == 60 and set(old_rule) == {"r-old"}


def key_on(partition: int, name: str) -> str:
    """A session id starting with ``name`` that Kafka's partitioner puts on ``partition``."""
    return next(f"{name}-{n}" for n in range(10**6) if partition_of(f"{name}-{n}".encode(), PARTITIONS) == partition)


def test_traffic_below_the_budget_is_all_sampled_when_spread_not_in_a_burst() -> None:
    """Half the budget's traffic spread over an hour (on each partition: a session of each bucket every
    144 s): every session sampled. As much traffic in a burst in the first 10 seconds of the next hour:
    only the burst allowance of each partition and bucket, 2 of 25 (the budget the first hour left unspent
    is not carried over: each period starts from nothing)."""
    config = StreamConfig(budget={"head": 200.0, "torso": 200.0, "tail": 200.0})  # 50 per partition
    rng = random.Random(5)
    spread = [(key_on(i % PARTITIONS, f"a{b}{i}"), HOUR + (i + rng.random()) * 36.0, b, "r1")
              for i in range(100) for b in BUCKETS]
    burst = [(key_on(i % PARTITIONS, f"b{b}{i}"), HOUR + 3600.0 + rng.random() * 10.0, b, "r1")
             for i in range(100) for b in BUCKETS]
    pipeline = run(sorted(spread, key=lambda e: e[1]) + sorted(burst, key=lambda e: e[1]), config)
    held = {sid for state in pipeline.state for sid in state.records}
    assert {sid for sid, _, _, _ in spread} <= held  # below the budget and spread: all
    taken = Counter((b, partition_of(sid.encode(), PARTITIONS)) for sid, _, b, _ in burst if sid in held)
    # 10 s in, the allowance is 50 · 10 / 3600 + 1 ≈ 1.14: two sessions per partition and bucket
    assert taken == {(b, p): 2 for b in BUCKETS for p in range(PARTITIONS)}


@settings(max_examples=200, deadline=None)
@given(bucket=st.sampled_from(BUCKETS), offset=st.floats(0.0, 7199.0), spent=st.floats(0.0, 40.0),
       partitions=st.integers(1, 8), unit=st.sampled_from(["sessions", "judgments"]))
def test_the_decision_reads_only_the_bucket_the_time_and_the_spend(bucket: str, offset: float, spent: float,
                                                                   partitions: int, unit: str) -> None:
    """Two impressions at the same time in the same bucket, of different rankers, arms and documents (one
    all graded, free; one new), with the same spend: the same decision, the rule's."""
    config = StreamConfig(budget={"head": 100.0, "torso": 60.0, "tail": 20.0}, budget_unit=unit)
    ts = HOUR + offset
    judged = {f"old-{j}": 2 for j in range(20)}
    decisions = []
    for ranker, variant, docs in (("r-a", "control", list(judged)), ("r-b", "canary", [f"new-{j}" for j in range(20)])):
        event = Impression(f"s-{ranker}", "q", ranker, ts, tuple(Result(d, j + 1) for j, d in enumerate(docs)),
                           variant=variant, query_bucket=bucket)
        loaded = Loaded(budget_used={bucket: spent}, query_labels=judged)
        t = step(event, loaded, config, FOUR_LEVEL_SCALE, partitions)
        decisions.append(any(c.name == "sampled" for c, _ in t.counters))
    assert decisions[0] == decisions[1] == sampled_by(bucket, ts, spent, config, partitions)


@pytest.mark.parametrize("seed", range(6))
def test_may_sample_at_the_batch_start_covers_every_sample_of_the_batch(seed: int) -> None:
    """Within a batch the spend only grows and the allowance is read at each impression's own ts (late ones
    included, across a period's end): every impression the steps sample passes ``may_sample`` with the
    spend at the batch's start, and some that did not pass at an earlier time do at a later one."""
    rng = random.Random(seed)
    config = StreamConfig(budget={"head": 40.0, "torso": 12.0, "tail": 8.0}, budget_period=600.0,
                          head_min_frequency=8.0, torso_min_frequency=3.0)
    state = PartitionState()
    for bucket in BUCKETS:
        for period in (16, 17):
            state.budget[(bucket, period)] = float(rng.randint(0, 4))
    start = dict(state.budget)
    events = [Impression(f"t{i}", f"q{rng.randrange(30)}", "r1", 9_900.0 + i * 1.5 - rng.choice([0.0, 0.0, 90.0]),
                         (Result("d", 1),), query_bucket=rng.choice([None, *BUCKETS])) for i in range(400)]
    refused: set[tuple[str, int]] = set()  # (bucket, period) with an impression may_sample refused
    later = 0  # sessions sampled after an impression of their bucket and period was refused
    for e in events:
        t = step(e, state.load(e, {}, config, {}, {}), config, FOUR_LEVEL_SCALE, PARTITIONS)
        state.apply(t)
        slot = (e.query_bucket or "", budget_period(e.ts, config))
        if any(c.name == "sampled" for c, _ in t.counters):
            assert may_sample(e, start, config, PARTITIONS), e
            later += slot in refused
        elif e.query_bucket is not None and not may_sample(e, start, config, PARTITIONS):
            refused.add(slot)
    assert later > 0  # the allowance grew within the batch: a spend that refused one admits a later one
