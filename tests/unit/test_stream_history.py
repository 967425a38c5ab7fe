"""The canary history of the in-process pipeline: epochs that sum to the totals, sightings per ranker and
arm, both forgotten after ``history`` of event time; and canary periods computed from it."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from monitor.core.canary import CanaryConfig, compare, comparisons
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.history import History, epoch_of
from monitor.store.memory import MemoryPipeline, partition_of
from tests.support.streams import impression, label

CONFIG = StreamConfig(join_window=300, state_ttl=600, min_coverage=0.5, epoch=600.0, history=3600.0,
                      budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


LONG = replace(CONFIG, join_window=1500.0, state_ttl=3000.0)  # sessions wait 25 minutes for their grades


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
    pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, prune_every=10, clock=lambda: None)
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
    pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, clock=lambda: None)
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
    assert replace(found[0].verdict, changes=0, changed_at=None, checks=()) == compare(
        period["tail|old|control"], period["tail|new|canary"], "dcg", config)  # (and the sample-ratio check)
    assert found[0].verdict.estimate == pytest.approx(0.0, abs=1e-12)
    whole = pipeline.snapshot().totals()
    assert compare(whole["tail|old|control"], whole["tail|new|canary"], "dcg", config).estimate < -0.3


def test_history_of_nothing_compares_nothing() -> None:
    assert comparisons(History(900.0, {}), [], CanaryConfig()) == []


@pytest.mark.parametrize(("seed", "partitions"), [(1, 1), (2, 1), (3, 3), (4, 3)])
def test_epochs_count_each_groups_impressions_as_a_brute_force_count_does(seed: int, partitions: int) -> None:
    """Every impression the join counts adds 1 to ``impressions`` of its group in the epoch of its ``ts``
    (what the canary's sample-ratio check reads): sampled or not, in any bucket, arm and ranker; an
    undeclared variant or a re-delivery of a session the join holds (a sampled one) adds nothing. The
    reference below replays the rules: the budget per bucket, period and partition (sessions mode, no
    query judgments: a session is sampled while its partition's spend is below its share paced over the
    period, ``min(share, share · elapsed + 1)``)."""
    config = StreamConfig(epoch=600.0, budget_period=1800.0, budget={"head": 12.0, "torso": 6.0, "tail": 3.0})
    rng = random.Random(seed)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, clock=lambda: None)
    expected: dict[int, dict[str, float]] = {}
    held: set[str] = set()  # sessions the join keeps a record of (sampled): their re-deliveries are duplicates
    spent: dict[tuple[int, str, int], float] = {}
    shown: list[bytes] = []
    ts = 3000.0
    for i in range(600):
        ts += rng.expovariate(1 / 20.0)
        if shown and rng.random() < 0.1:  # a re-delivery, a little later
            raw = rng.choice(shown)
        else:
            bucket = rng.choice(["head", "torso", "tail"])
            raw = impression(f"s{i}", ts - rng.uniform(0.0, 300.0), ["a", "b"], bucket,
                             variant=rng.choice(["control", "control", "canary", "blue"]),
                             ranker=rng.choice(["r1", "r2"]))
            shown.append(raw)
        event = json.loads(raw)
        sid = event["session_id"]
        pipeline.submit("impressions", sid.encode(), raw)
        if event["variant"] == "blue" or sid in held:  # undeclared (counted as "other"), or a duplicate
            continue
        group = f"{event['query_bucket']}|{event['ranker']}|{event['variant']}"
        epoch = epoch_of(event["ts"], config.epoch)
        expected.setdefault(epoch, {})[group] = expected.get(epoch, {}).get(group, 0.0) + 1.0
        period = math.floor(event["ts"] / config.budget_period)
        key = (partition_of(sid.encode(), partitions), event["query_bucket"], period)
        share = config.budget[event["query_bucket"]] / partitions
        elapsed = (event["ts"] - period * config.budget_period) / config.budget_period
        if spent.get(key, 0.0) < min(share, share * elapsed + 1.0):  # paced over the period
            spent[key] = spent.get(key, 0.0) + 1.0
            held.add(sid)
    pipeline.advance(math.inf)
    counted = {index: {group: stats["impressions"] for group, stats in groups.items() if "impressions" in stats}
               for index, groups in pipeline.history().epochs.items()}
    assert counted == expected
    assert len(expected) > 5 and len({g for groups in expected.values() for g in groups}) == 12
    assert 0.2 < len(held) / sum(n for groups in expected.values() for n in groups.values()) < 0.8  # sampled
    assert pipeline.counter("duplicate_impressions") > 0 and pipeline.counter("undeclared", label="variant") > 0
    assert pipeline.counter("sampled", "tail|r1|control") < pipeline.counter("impressions", "tail|r1|control")
    # the counters are unchanged: per declared group, the epochs' impressions sum to its impressions counter
    for group, stats in pipeline.history().totals().items():
        assert stats["impressions"] == pipeline.counter("impressions", group), group


# -- settled epochs: what a look may read (issue 42) ------------------------------------------------------

def test_an_epoch_is_settled_once_it_ended_and_none_of_its_sessions_waits_for_grades() -> None:
    """Epoch 0: one session graded at once; epoch 1: one session waiting for grades (open); epoch 2: the
    current one. Only epoch 0 may be read; once the waiting sessions close (their deadlines passed by the
    stream's time) epochs 1 and 2 may be too; the current epoch never, until the stream ended; an epoch
    that ended ``grace`` ago is read even with a session still open."""
    pipeline = MemoryPipeline(LONG, FOUR_LEVEL_SCALE, prune_every=10**9, clock=lambda: None)
    labelled(pipeline, "s0", 10.0, "a", "control", 3)  # epoch 0, scored at once
    pipeline.submit("impressions", b"s1", impression("s1", 610.0, ["x", "y"], "tail", variant="control"))
    pipeline.submit("impressions", b"s2", impression("s2", 1210.0, ["z"], "tail", variant="control"))
    history = pipeline.history()
    assert history.open_sessions("tail") == {1: 1, 2: 1} and history.open_sessions("head") == {}
    assert [s["sampled"] for s in history.epochs[1].values()] == [1.0]
    assert history.settled("tail", grace=10**6) == 0
    assert history.settled("tail", grace=10.0) == 1  # epoch 1 ended 10 s ago: read all the same
    assert history.until(0).epochs.keys() == {0} and history.until(None) is history
    pipeline.submit("impressions", b"s3", impression("s3", 2800.0, ["w"], "tail", variant="control"))
    later = pipeline.history()  # s1 and s2 closed (expired, no grade), epochs up to 3 over
    assert later.open_sessions("tail") == {4: 1} and later.settled("tail", grace=10**6) == 3
    assert later.settled("tail", grace=0.0) == 3  # the current epoch is not read, whatever the grace
    pipeline.advance(math.inf)
    assert pipeline.history().ended and pipeline.history().settled("tail", grace=10**6) is None


def test_an_undeclared_impression_moves_the_streams_time_on() -> None:
    """The stream's time is its watermark, not only the last sighting of a declared ranker: an impression
    of an undeclared variant (only counted, as a worker's flush or mixed traffic sends) ends the epochs
    before it, as a declared one would."""
    pipeline = MemoryPipeline(LONG, FOUR_LEVEL_SCALE, prune_every=10**9, clock=lambda: None)
    labelled(pipeline, "s0", 10.0, "a", "control", 3)
    labelled(pipeline, "s1", 700.0, "a", "control", 2)
    before = pipeline.history()
    assert before.latest == 700.0 and before.settled("tail", grace=10**6) == 0  # epoch 1 still current
    pipeline.submit("impressions", b"u", impression("u", 1300.0, ["u"], "tail", variant="undeclared-variant"))
    after = pipeline.history()
    assert after.watermark == 1300.0 and after.latest == 1300.0
    assert after.settled("tail", grace=10**6) is None  # epochs 0 and 1 both read (2 holds no session)
    assert after.until(1).watermark == 1300.0
    assert History(600.0, {}, {("plain", "a"): (0.0, 50.0)}, watermark=20.0).latest == 50.0


def test_a_look_reads_only_settled_epochs() -> None:
    """A comparison leaves out the epochs from the first one with an open session on: the canary's verdict
    counts the sessions of the settled epochs only, and all of them once the stream ended."""
    pipeline = MemoryPipeline(LONG, FOUR_LEVEL_SCALE, prune_every=10**9, clock=lambda: None)
    config = CanaryConfig(min_sessions=2, time_matched=False, adjust_queries=False)
    for i in range(40):  # 40 graded sessions per arm in epoch 0, then one session per arm left waiting
        labelled(pipeline, f"c{i}", 5.0 + i, "a", "control", 2 + i % 2)
        labelled(pipeline, f"k{i}", 5.5 + i, "b", "canary", 2 + i % 2)
    for sid, variant, ranker in (("c-open", "control", "a"), ("k-open", "canary", "b")):
        pipeline.submit("impressions", sid.encode(), impression(sid, 700.0, [f"{sid}-d"], "tail", variant=variant,
                                                                ranker=ranker))
    labelled(pipeline, "c-late", 1300.0, "a", "control", 3)  # epoch 2: over at 1800
    pipeline.submit("impressions", b"tick", impression("tick", 1850.0, ["t"], "head"))
    verdicts = comparisons(pipeline.history(), [], config)
    assert verdicts and {(c.verdict.n_baseline, c.verdict.n_candidate) for c in verdicts} == {(40, 40)}
    pipeline.advance(math.inf)
    ended = comparisons(pipeline.history(), [], config)
    assert {(c.verdict.n_baseline, c.verdict.n_candidate) for c in ended} == {(41, 40)}  # the waiting expired
