"""Issue 15's hostile-input suite on the embedded default (``MemoryPipeline``), property-based: for each
kind of hostile input, the valid events give the same numbers with and without it mixed in.

World: the simulator's realistic settings (``monitor/sim``): a few percent of sessions labelled
(``label_share`` 0.05), 2% of labels before their impression, corrections, duplicates, redeliveries, a
query mix that follows the clock (``night_dip`` 0.08, the deploy tests' 8% night dip), over 12 hours, on 3 partitions; hypothesis draws
the seed and where the hostile events go. The real worker's side of the suite is
tests/integration/test_worker_hostile.py.

"The same numbers": every group's summed session statistics (DCG, NDCG, PNR pairs, RR, coverage,
sessions, expired) to 1e-9, join lag aside (when a session is first scored depends on when its labels
came), and the impression and sampling counts, after the end of the stream closes every session.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.partition import partition_for
from monitor.store.memory import MemoryPipeline
from tests.support.hostile import FAR_FUTURE, Events, ghost, impression, resent_old_grades, world

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

CONFIG = StreamConfig(join_window=1800, min_coverage=0.8, budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
PARTITIONS = 3
NOW = 1_800_000_000.0  # the wall clock of these runs (2027); the simulated stream is in 2025


def run(events: Events, config: StreamConfig = CONFIG) -> MemoryPipeline:
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=PARTITIONS, clock=lambda: NOW)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)
    return pipeline


def numbers(pipeline: MemoryPipeline, skip_groups: Callable[[str], bool] = lambda g: False
            ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    totals = {g: {k: v for k, v in stats.items() if k != "join_lag" and abs(v) > 1e-9}
              for g, stats in pipeline.snapshot().totals().items() if not skip_groups(g)}
    counts: dict[str, float] = {}
    for counter, value in pipeline.counters.items():
        group, name = counter.group, counter.name
        if name in ("impressions", "sampled") and not skip_groups(group):
            counts[f"{group}|{name}"] = counts.get(f"{group}|{name}", 0.0) + value
    return {g: s for g, s in totals.items() if s}, counts


def assert_same(got: MemoryPipeline, want: MemoryPipeline,
                skip_groups: Callable[[str], bool] = lambda g: False) -> None:
    (gt, gc), (wt, wc) = numbers(got, skip_groups), numbers(want, skip_groups)
    assert set(gt) == set(wt) and gt, (sorted(set(gt) ^ set(wt)), len(gt))
    for group, stats in wt.items():
        assert gt[group] == pytest.approx(stats, rel=1e-9, abs=1e-9), group
    assert gc == wc
    assert sum(s.get("sessions", 0.0) for s in wt.values()) > 0


def scatter(events: Events, extra: Events, rng: random.Random) -> Events:
    out = list(events)
    for event in extra:
        out.insert(rng.randrange(len(out) + 1), event)
    return out


# no shrinking: each example simulates a whole stream, and the failing seed is printed anyway
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])


@SETTINGS
@given(seed=st.integers(0, 10_000), place=st.integers(0, 10_000))
def test_wrong_clocks_change_no_valid_number(seed: int, place: int) -> None:
    events = world(seed)
    rng = random.Random(place)
    last = max(json.loads(v)["ts"] for t, _, v in events if t == "impressions")
    bad: Events = [
        ("impressions", b"future", impression("future", FAR_FUTURE)),
        ("deploys", b"r9", json.dumps({"type": "deploy", "kind": "deploy", "ranker": "r9", "ts": FAR_FUTURE,
                                       "previous": "ranker-a"}).encode()),
    ]
    mixed = [*scatter(events, bad, rng), ("impressions", b"past", impression("past", last - 4 * CONFIG.state_ttl))]
    got = run(mixed)
    assert got.counter("dead_letter", label="ts_out_of_range") == 3
    assert_same(got, run(events))


@SETTINGS
@given(seed=st.integers(0, 10_000), place=st.integers(0, 10_000), count=st.integers(1, 3000))
def test_a_ghost_label_flood_below_the_cap_changes_no_valid_number(seed: int, place: int, count: int) -> None:
    events = world(seed)
    got = run(scatter(events, [ghost(i) for i in range(count)], random.Random(place)))
    assert got.counter("labels_dropped", label="evicted") == 0
    assert sum(len(s.early) for s in got.state) >= 1  # the ghosts wait (till state_ttl), counted nowhere
    assert_same(got, run(events))


@SETTINGS
@given(seed=st.integers(0, 10_000), share=st.floats(0.05, 1.0))
def test_labels_before_the_first_impression_change_no_number(seed: int, share: float) -> None:
    """The annotations of a share of the sessions and queries moved to the very start of the stream
    (before any impression, when the watermark is still −∞), in their order (a correction without ts
    still comes after what it corrects): the same numbers as in their place."""
    events = world(seed)
    rng = random.Random(seed)
    keys = sorted({e[1] for e in events if e[0] == "annotations"})
    chosen = {k for k in keys if rng.random() < share} or set(keys[:1])  # a small share of few keys: one
    moved = [e for e in events if e[0] == "annotations" and e[1] in chosen]
    ids = {id(e) for e in moved}
    first = moved + [e for e in events if id(e) not in ids]
    assert moved and first[0][0] == "annotations"
    assert_same(run(first), run(events))


@SETTINGS
@given(seed=st.integers(0, 10_000), stop=st.floats(0.1, 0.8))
def test_a_partition_that_goes_quiet_closes_as_if_traffic_had_gone_on(seed: int, stop: float) -> None:
    """Partition 0's impressions stop at a share ``stop`` of the stream (the events of its later sessions
    are left out). Before the end of the stream, its sessions are closed exactly as one more impression on
    it at the others' event time minus idle_after would close them (the reference, its own group left
    out); without the rule they wait."""
    events = world(seed)
    cut = json.loads(next(v for t, _, v in events[int(len(events) * stop):] if t == "impressions"))["ts"]

    def on_quiet(key: bytes, value: bytes) -> bool:
        return partition_for(key, PARTITIONS) == 0 and json.loads(value).get("ts", 0.0) >= cut

    kept = [e for e in events if not (e[0] == "impressions" and on_quiet(e[1], e[2]))]
    live = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=PARTITIONS, clock=lambda: NOW)
    stuck = MemoryPipeline(replace(CONFIG, idle_after=1e12), FOUR_LEVEL_SCALE, partitions=PARTITIONS,
                           clock=lambda: NOW)
    for topic, key, value in kept:
        live.submit(topic, key, value)
        stuck.submit(topic, key, value)
    horizon = stuck.watermark - CONFIG.idle_after
    waiting = sum(1 for deadline in stuck.state[0].deadlines.values() if deadline <= horizon)
    # without the rule the quiet partition's due sessions wait; in a few worlds (seed 3040, stop 0.213)
    # none of its sessions is due yet by then, and there is nothing to compare: another example is drawn
    assume(waiting > 0)
    sid = next(f"keepalive-{i}" for i in range(10_000)
               if partition_for(f"keepalive-{i}".encode(), PARTITIONS) == 0)
    stuck.submit("impressions", sid.encode(), impression(sid, horizon, ranker="keepalive"))
    assert_same(live, stuck, skip_groups=lambda g: "keepalive" in g)
    assert not any(deadline <= horizon for deadline in live.state[0].deadlines.values())


@SETTINGS
@given(seed=st.integers(0, 10_000), place=st.integers(0, 10_000))
def test_re_sent_old_grades_change_no_number(seed: int, place: int) -> None:
    """Old grades re-sent after the grade they preceded (and after its corrections), anywhere later in
    the stream: the same numbers, each counted as a stale grade."""
    events = world(seed)
    rng = random.Random(place)
    resent = resent_old_grades(events, rng, 200)
    assert resent
    mixed = list(events)
    for event in resent:  # after the annotation it is older than: anywhere from there to the end
        key, value = event[1], json.loads(event[2])
        after = max(i for i, e in enumerate(mixed) if e[0] == "annotations" and e[1] == key
                    and b'"ts"' in e[2] and json.loads(e[2])["ts"] > value["ts"])
        mixed.insert(rng.randrange(after + 1, len(mixed) + 1), event)
    got, want = run(mixed), run(events)
    assert got.counter("stale_labels") + sum(v for c, v in got.counters.items()
                                             if c.group and c.name == "stale_labels") >= len(resent)
    assert_same(got, want)


@SETTINGS
@given(seed=st.integers(0, 10_000), place=st.integers(0, 10_000))
def test_junk_rankers_and_variants_change_no_valid_number(seed: int, place: int) -> None:
    """5,000 impressions with 5,000 distinct variant and ranker names (the issue's case), each dated like
    the impression before it (so they move no watermark): with the default declaration (variants control
    and canary) they are counted under ``other``, never sampled, and the real groups' numbers, samples and
    budget are those of the valid stream."""
    events = world(seed)
    rng = random.Random(place)
    mixed = list(events)
    for i in range(5000):
        at = rng.randrange(1, len(mixed) + 1)
        before = next((json.loads(v)["ts"] for t, _, v in reversed(mixed[:at]) if t == "impressions"), None)
        if before is None:
            continue
        sid = f"junk-{i}"
        value = impression(sid, before, ranker=f"junk-ranker-{i}", variant=f"junk-variant-{i}")
        mixed.insert(at, ("impressions", sid.encode(), value))
    junk = sum(1 for _, k, _ in mixed if k.startswith(b"junk-"))
    got, want = run(mixed), run(events)
    assert got.counter("undeclared", label="variant") == junk > 4000
    assert not any(c.group.startswith("junk") or "|junk-variant" in c.group for c in got.counters if c.group)
    assert_same(got, want, skip_groups=lambda g: g.endswith("|other"))
    assert sum(got.counter("sampled", c.group) for c in got.counters if c.name == "sampled") == \
        sum(want.counter("sampled", c.group) for c in want.counters if c.name == "sampled")
