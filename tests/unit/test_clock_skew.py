"""Issue 15, defect 1: one event with a wrong clock must not blind the monitor. An impression or deploy
more than ``max_future`` ahead of the wall clock, or an impression older than ``state_ttl`` behind its
partition's event time, is a dead letter ``ts_out_of_range``; the valid events around it give exactly
the numbers they give alone (and, without the rule, the same stream loses sessions and verdicts)."""

from __future__ import annotations

import math

import pytest

from monitor.core.canary import CanaryConfig, comparisons
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.counters import DEAD_LETTER, Counter
from monitor.store.memory import MemoryPipeline
from tests.support.clock_skew import CONFIG, Events, hostile
from tests.support.streams import random_stream

NOW = 1_800_000_000.0  # the wall clock of these runs (2027): the stream's times are in 2023
START = 1_700_000_000.0


def run(events: Events, clock: float | None, partitions: int = 2) -> MemoryPipeline:
    pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=partitions, prune_every=50, clock=lambda: clock)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)
    return pipeline


def numbers(pipeline: MemoryPipeline) -> tuple[dict[str, dict[str, float]], dict[tuple[str, str], float]]:
    counters = {k: v for k, v in pipeline.counters.items() if v and k.name != DEAD_LETTER}
    return pipeline.snapshot().totals(), counters


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_events_with_a_wrong_clock_are_dead_letters_and_change_no_number(seed: int) -> None:
    events, _ = random_stream(seed, sessions=200, start=START)
    mixed, count = hostile(events, seed)
    clean, dirty = run(events, NOW), run(mixed, NOW)
    clean_totals, clean_counters = numbers(clean)
    dirty_totals, dirty_counters = numbers(dirty)
    assert dirty_counters == clean_counters
    assert set(dirty_totals) == set(clean_totals)
    for group, stats in clean_totals.items():
        assert dirty_totals[group] == pytest.approx(stats, abs=1e-9), group
    assert dirty.counter("dead_letter", label="ts_out_of_range") == count
    reasons = [d.reason for d in dirty.dead_letters]
    assert sum("ahead of the wall clock" in r for r in reasons) == 2
    assert sum("behind its partition's event time" in r for r in reasons) == 1
    assert comparisons(dirty.history(), [], CanaryConfig()) == comparisons(clean.history(), [], CanaryConfig())


def test_without_the_clock_rule_one_far_future_impression_loses_the_sessions_after_it() -> None:
    """The defect the rule fixes, shown on the same stream: with no clock to compare with (the rule off),
    the 9999 impression moves its partition's watermark past every deadline and window, and the valid
    impressions after it on that partition count as older than state_ttl: their sessions are lost."""
    events, _ = random_stream(1, sessions=200, start=START)
    mixed, _ = hostile(events, 1)
    clean = numbers(run(events, None))[1]
    blinded = run(mixed, None)

    def scored(counters: dict[Counter, float]) -> float:
        return sum(v for c, v in counters.items() if c.name == "scored")

    assert scored(numbers(blinded)[1]) < scored(clean) - 20
    assert blinded.counter("dead_letter", label="ts_out_of_range") > 20


def test_max_future_is_validated() -> None:
    with pytest.raises(ConfigError, match="max_future must be a positive number of seconds"):
        StreamConfig(max_future=0.0)
