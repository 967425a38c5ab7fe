"""Issue 15, defects 3 and 4, on the embedded default (``MemoryPipeline``).

3. A quiet partition closes its sessions: a partition whose impressions stop while the others go on
   closes what is due by the others' event time minus ``idle_after`` (``join.quiet_horizon``), checked
   after every impression, so a replay is deterministic; without the rule the sessions wait for ever.
4. A flood of labels for sessions never shown is bounded: at most ``max_early_sessions`` sessions' early
   labels wait per partition, the oldest are evicted first and every evicted grade is counted
   (``LABELS_EVICTED``: ``labels_dropped`` with the label ``evicted``); the valid stream's numbers are
   unchanged by the flood.

World: hand-made streams (``tests/unit/test_stream_core``'s helpers) of a few hundred sessions at a
constant rate, 2 or 3 partitions by Kafka's partitioner; the flood is 300,000 annotations (as in the
issue) for session ids never shown, mixed into the middle of a 300-session stream.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.counters import labels_dropped
from monitor.core.stream.join import quiet_horizon
from monitor.store.memory import MemoryPipeline
from tests.support.quiet_flood import CONFIG, Events, ghost, quiet_stream, run
from tests.support.streams import impression, label, random_stream

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")


def same_numbers(a: MemoryPipeline, b: MemoryPipeline) -> bool:
    """Equal totals per group to 1e-9, join lag aside (when a session is first scored depends on when it
    closed: the event time of that moment)."""
    def net(p: MemoryPipeline) -> dict[str, dict[str, float]]:  # a statistic added and taken back: 0
        return {g: {k: v for k, v in stats.items() if k != "join_lag" and abs(v) > 1e-9}
                for g, stats in p.snapshot().totals().items()}

    ta, tb = net(a), net(b)
    assert set(ta) == set(tb)
    for group, stats in tb.items():
        assert ta[group] == pytest.approx(stats, rel=1e-9, abs=1e-9), group
    return True


def statuses(pipeline: MemoryPipeline, sessions: list[str]) -> dict[str, str]:
    return {sid: pipeline.state[p].records[sid].status for p in range(pipeline.partitions)
            for sid in sessions if sid in pipeline.state[p].records}


@pytest.mark.parametrize("partitions", [2, 3])
def test_a_quiet_partition_closes_its_sessions_by_the_others_event_time(partitions: int) -> None:
    events, quiet = quiet_stream(partitions)
    stuck = run(events, StreamConfig(**{**CONFIG.__dict__, "idle_after": 1e9}), partitions)
    waiting = statuses(stuck, quiet)
    assert sorted(waiting.values()) == ["pending"] * 10 + ["scored"] * 10, "without the rule they wait"
    pipeline = run(events, partitions=partitions)
    got = statuses(pipeline, quiet)
    # half were fully labelled (scored at once), the other half had no label: expired by the quiet rule
    assert sorted(got.values()) == ["expired"] * 10 + ["scored"] * 10
    assert pipeline.state[0].watermark == 1019.0, "the quiet partition's own watermark does not move"
    assert not pipeline.state[0].deadlines
    # the same stream again: the same closes at the same point (the check follows the stream, not a clock)
    again = run(events, partitions=partitions)
    assert again.snapshot().totals() == pipeline.snapshot().totals()
    assert again.counters == pipeline.counters


def test_a_session_closed_while_its_partition_was_quiet_is_rescored_by_a_late_label() -> None:
    """The quiet rule only does earlier what the end of the stream does: the final numbers are the same
    with it, without it and with the late labels before or after the close."""
    events, quiet = quiet_stream()
    unlabelled = [sid for i, sid in enumerate(quiet) if i % 2 == 1]
    late: Events = [("annotations", s.encode(), label(s, d, 2)) for s in unlabelled for d in ("a", "b")]
    closed_then_labelled = run(events + late, end=True)
    assert set(statuses(closed_then_labelled, quiet).values()) == {"scored"}
    never_quiet = run(events + late, StreamConfig(**{**CONFIG.__dict__, "idle_after": 1e9}), end=True)
    assert same_numbers(closed_then_labelled, never_quiet)
    assert closed_then_labelled.counter("expired", "tail|r1|control") == 10  # then rescued
    assert never_quiet.counter("expired", "tail|r1|control") == 0


def test_quiet_horizon_rule() -> None:
    config = StreamConfig(idle_after=600)
    assert quiet_horizon(1000.0, 1500.0, config) is None            # within idle_after: not quiet
    assert quiet_horizon(1000.0, 2000.0, config) == 1400.0
    assert quiet_horizon(-math.inf, 2000.0, config) is None         # no impression yet: nothing to close
    assert quiet_horizon(1000.0, 1000.0, config, wall_elapsed=50.0) == 1050.0
    assert quiet_horizon(1000.0, 2000.0, config, wall_elapsed=5000.0) == 6000.0
    with pytest.raises(ConfigError, match="idle_after"):
        StreamConfig(idle_after=0)
    with pytest.raises(ConfigError, match="max_early_sessions"):
        StreamConfig(max_early_sessions=0)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_ghost_label_flood_keeps_memory_bounded_and_counts_every_dropped_grade() -> None:
    events, _ = random_stream(7, sessions=300)
    config = StreamConfig(**{**CONFIG.__dict__, "max_early_sessions": 1000, "state_ttl": 1e7})
    flood = [ghost(i) for i in range(300_000)]
    middle = len(events) // 2
    mixed = events[:middle] + flood + events[middle:]
    alone = run(events, config, end=True)
    before = rss_mib()
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=2, clock=lambda: None)
    for topic, key, value in mixed:
        pipeline.submit(topic, key, value)
    growth = rss_mib() - before
    pipeline.advance(math.inf)
    waiting = sum(len(s.early) for s in pipeline.state)
    assert waiting <= 2 * config.max_early_sessions
    ghosts_waiting = sum(1 for s in pipeline.state for sid in s.early if sid.startswith("ghost-"))
    assert pipeline.counter("early_sessions_evicted") == len(flood) - ghosts_waiting
    assert pipeline.counter("labels_dropped", label="evicted") == 2 * (len(flood) - ghosts_waiting)
    # 2,000 sessions' labels waiting, not 300,000 (the issue's replay grew by 109 MB)
    assert growth < 30, f"RSS grew {growth:.1f} MiB"
    assert pipeline.snapshot().totals() == alone.snapshot().totals(), "the valid sessions' numbers changed"
    for name in ("impressions", "sampled", "scored", "expired"):
        assert sum(v for c, v in pipeline.counters.items() if c.name == name) == \
            sum(v for c, v in alone.counters.items() if c.name == name)
    exported = pipeline.snapshot().counters
    assert exported[labels_dropped("evicted")] == 2 * (len(flood) - ghosts_waiting)


def test_eviction_takes_the_oldest_waiting_labels_first() -> None:
    """Cap 3 per partition, one partition: a real session's labels arrive, then ghosts. Up to two ghosts
    later its labels still wait and score it; the third evicts them (the oldest), and it expires."""
    config = StreamConfig(**{**CONFIG.__dict__, "max_early_sessions": 3})

    def scored_with(ghosts: int) -> float:
        events: Events = [("annotations", b"real", label("real", "a", 3)),
                          ("annotations", b"real", label("real", "b", 2))]
        events += [ghost(i) for i in range(ghosts)]
        events.append(("impressions", b"real", impression("real", 1000.0, ["a", "b"])))
        pipeline = run(events, config, partitions=1, end=True)
        assert pipeline.counter("early_sessions_evicted") == max(0, ghosts + 1 - 3)
        return pipeline.counter("scored", "tail|r1|control")

    assert scored_with(0) == scored_with(2) == 1.0
    assert scored_with(3) == 0.0


def test_a_random_interleaving_of_ghosts_changes_no_valid_number_below_the_cap() -> None:
    events, _ = random_stream(11, sessions=200)
    rng = random.Random(5)
    mixed = list(events)
    for i in range(2000):
        mixed.insert(rng.randrange(len(mixed) + 1), ghost(i))
    alone, flooded = run(events, end=True), run(mixed, end=True)
    assert flooded.snapshot().totals() == alone.snapshot().totals()
    assert flooded.counter("labels_dropped", label="evicted") == 0
