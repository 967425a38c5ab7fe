"""The canary history of the in-process pipeline: epochs that sum to the totals, sightings per ranker and
arm, both forgotten after ``history`` of event time; and canary periods computed from it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from monitor.core.canary import CanaryConfig, compare, comparisons
from monitor.core.grades import SEED_SCALE
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.history import History, epoch_of
from monitor.pipeline.memory import MemoryPipeline
from tests.support.streams import impression, label

CONFIG = StreamConfig(join_window=300, state_ttl=600, min_coverage=0.5, epoch=600.0, history=3600.0,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


def labelled(pipeline: MemoryPipeline, sid: str, ts: float, ranker: str, variant: str, grade: int) -> None:
    docs = [f"{sid}-a", f"{sid}-b"]
    pipeline.submit("impressions", sid.encode(), impression(sid, ts, docs, "tail", variant=variant, ranker=ranker))
    for doc in docs:
        pipeline.submit("annotations", sid.encode(), label(sid, doc, grade))


def test_history_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="epoch must be a positive number of seconds"):
        StreamConfig(epoch=0.0)
    with pytest.raises(ConfigError, match=r"history \(60.0\) must be at least epoch \(900.0\)"):
        StreamConfig(history=60.0)


def test_epochs_sum_to_the_totals_and_are_forgotten_after_history() -> None:
    pipeline = MemoryPipeline(CONFIG, SEED_SCALE, prune_every=10)
    for i in range(60):  # one session a minute for an hour: six epochs
        labelled(pipeline, f"s{i}", 60.0 * i, "r1", "control", i % 4)
    pipeline.advance(3600.0)
    history = pipeline.history()
    assert sorted(history.epochs) == [0, 1, 2, 3, 4, 5]
    assert history.epochs[2]["tail|r1|control"]["sessions"] == 10
    totals = pipeline.snapshot().totals()
    for name, value in totals["tail|r1|control"].items():
        assert history.totals()["tail|r1|control"][name] == pytest.approx(value, abs=1e-9), name
    assert history.seen == {("plain", "r1"): (0.0, 3540.0)}
    # two hours later in event time: the old epochs and the ranker that stopped are forgotten
    for i in range(30):
        labelled(pipeline, f"t{i}", 3 * 3600.0 + 60.0 * i, "r2", "control", 2)
    pipeline.advance(3 * 3600.0 + 1800.0)
    pipeline.prune()
    later = pipeline.history()
    assert min(later.epochs) >= epoch_of(pipeline.watermark - CONFIG.history, CONFIG.epoch)
    assert len(later.epochs) <= CONFIG.history / CONFIG.epoch + 1
    assert set(later.seen) == {("plain", "r2")}


def test_a_canary_started_late_is_compared_with_the_control_of_its_period() -> None:
    """The control served an hour alone with a high DCG; the canary starts later, equal to the control
    of its own period: the verdict sees only that period (and the whole-stream totals would differ)."""
    pipeline = MemoryPipeline(CONFIG, SEED_SCALE)
    for i in range(60):
        labelled(pipeline, f"early{i}", 60.0 * i, "old", "control", 3)
    for i in range(60):
        ts = 3600.0 + 30.0 * i
        labelled(pipeline, f"c{i}", ts, "old", "control", 1)
        labelled(pipeline, f"k{i}", ts + 1, "new", "canary", 1)
    pipeline.advance(math.inf)
    config = CanaryConfig(min_sessions=2, time_matched=False, sticky=False)
    history = pipeline.history()
    found = comparisons(history, [], config)
    assert [(c.kind, c.baseline, c.candidate) for c in found] == [("canary", "old", "new")] * 2
    period = history.totals(epoch_of(3600.0, CONFIG.epoch))
    assert period["tail|old|control"]["sessions"] == 60
    assert replace(found[0].verdict, changes=0, changed_at=None) == compare(
        period["tail|old|control"], period["tail|new|canary"], "dcg", config)
    assert found[0].verdict.estimate == pytest.approx(0.0, abs=1e-12)
    whole = pipeline.snapshot().totals()
    assert compare(whole["tail|old|control"], whole["tail|new|canary"], "dcg", config).estimate < -0.3


def test_history_of_nothing_compares_nothing() -> None:
    assert comparisons(History(900.0, {}), [], CanaryConfig()) == []
