"""Issue 29, item 6: which sessions are sampled does not depend on how the partitions' events interleave,
``monitor replay --partitions N`` routes as the worker's topics do, and ``monitor produce --write-events``
writes what it sends, with session ids of its own.

The worker reads each partition in Kafka's order, but how the partitions (and, within one, the impression
and annotation topics) interleave is up to its consumers. Here the same simulated stream goes through the
in-process core in many such interleavings, with a budget that binds and query-level judgments (before
issue 29 a judged query's sessions bypassed the budget, so whether the judgment, keyed by query to another
partition, came first decided which later sessions were sampled).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from pathlib import Path

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.snapshot import Snapshot
from monitor.demo import replay_cli
from monitor.demo.events_file import read_events
from monitor.sim import SimConfig, SimEvent, generate
from monitor.sim.jsonl import write_through
from monitor.store.memory import MemoryPipeline, partition_of
from monitor.worker.produce import build_parser, run_config, sent_events

PARTITIONS = 4
# 1,500 sessions in 30 minutes against 120 sessions per bucket per hour: every bucket's share binds
CONFIG = StreamConfig(budget={"head": 120.0, "torso": 120.0, "tail": 120.0}, max_closes_per_step=1_000_000)
SIM = SimConfig(seed=4, n_sessions=1500, duration_s=1800.0, start_ts=1_763_712_000.0, id_prefix="o",
                query_judgment_share=0.3)


@pytest.fixture(scope="module")
def events() -> list[SimEvent]:
    return [e for e in generate(SIM) if e.expected_error is None]


def interleaved(events: list[SimEvent], seed: int) -> list[SimEvent]:
    """Another order a worker may read ``events`` in: each (topic, partition) keeps its order, the lanes
    interleave at random."""
    lanes: dict[tuple[str, int], list[SimEvent]] = {}
    for e in events:
        lanes.setdefault((e.topic, partition_of(e.key, PARTITIONS)), []).append(e)
    rng = random.Random(seed)
    queues = [list(v) for _, v in sorted(lanes.items())]
    out: list[SimEvent] = []
    while queues:
        lane = rng.choice(queues)
        take = rng.randint(1, 400)
        out.extend(lane[:take])
        del lane[:take]
        queues = [q for q in queues if q]
    return out


def run(events: list[SimEvent], config: StreamConfig = CONFIG, partitions: int = PARTITIONS) -> MemoryPipeline:
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, clock=lambda: None)
    for e in events:
        pipeline.submit(e.topic, e.key, e.value)
    pipeline.advance(math.inf)
    return pipeline


def sampled_sessions(pipeline: MemoryPipeline) -> set[str]:
    return {sid for state in pipeline.state for sid in state.records}


def net(snapshot: Snapshot) -> dict[tuple[str, str], float]:
    """Each group's statistics added minus taken back (join lag aside: it records when labels came)."""
    out: dict[tuple[str, str], float] = {}
    for group, stats in snapshot.added.items():
        for name, value in stats.items():
            if name != "join_lag":
                out[(group, name)] = value - snapshot.removed.get(group, {}).get(name, 0.0)
    return out


def test_the_sampled_sessions_do_not_depend_on_how_partitions_interleave(events: list[SimEvent]) -> None:
    judged_queries = [e for e in events if e.topic == "annotations" and b'"session_id"' not in e.value]
    assert len(judged_queries) > 20  # query-level judgments, keyed by query: on other partitions
    reference = run(events)
    sessions = sampled_sessions(reference)
    impressions = sum(v for c, v in reference.counters.items() if c.name == "impressions")
    assert 0.1 * impressions < len(sessions) < 0.6 * impressions  # the budget binds
    spent = [s.budget for s in reference.state]
    want = net(reference.snapshot())
    for seed in range(6):
        other = run(interleaved(events, seed))
        assert sampled_sessions(other) == sessions, seed
        assert [s.budget for s in other.state] == spent
        got = net(other.snapshot())
        assert set(got) == set(want)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (seed, key)
    # the partition count is an input of the rule (each partition's share): one partition samples others
    assert sampled_sessions(run(events, partitions=1)) != sessions


def test_a_judged_querys_session_counts_in_the_budget_like_any_other() -> None:
    from tests.support.streams import impression

    config = StreamConfig(budget={"head": 0.0, "torso": 0.0, "tail": 1.0})
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    query = json.dumps({"type": "annotation", "query": "q", "grades": [{"doc_id": "a", "grade": 3}]}).encode()
    pipeline.submit("annotations", b"q", query)
    for sid in ("s1", "s2"):
        pipeline.submit("impressions", sid.encode(), impression(sid, 1000.0, ["a", "b"], query="q"))
    assert sampled_sessions(pipeline) == {"s1"}  # before issue 29: both (s2 outside the budget)
    assert pipeline.counter("sampled", "tail|r1|control") == 1


def test_replay_with_partitions_routes_as_the_workers_topics(events: list[SimEvent], tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(e.value + b"\n" for e in events))
    summaries = {}
    for n in (1, PARTITIONS):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert replay_cli.main([str(path), "--json", "--budget", "120", "--partitions", str(n)]) == 0
        summaries[n] = json.loads(out.getvalue())
    config = replay_cli.stream_config(120.0, "sessions")
    expected = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=PARTITIONS, clock=lambda: None)
    for line in read_events(path):
        expected.submit(line.topic, line.key, line.value)
    expected.advance(math.inf)
    sampled = round(sum(v for c, v in expected.counters.items() if c.name == "sampled"))
    # paced: the stream is the first half of its hour, so each partition's allowance per bucket reaches
    # 120 / 4 · 0.5 + 1 = 16 sessions by its end, and every one of the 4 × 3 binds: 192 of the hour's 360
    assert summaries[PARTITIONS]["sessions"]["sampled"] == sampled == 192
    assert summaries[1]["groups"] != summaries[PARTITIONS]["groups"]  # the same budget, other sessions
    groups = {f"{g['bucket']}|{g['ranker']}|{g['variant']}": g for g in summaries[PARTITIONS]["groups"]}
    for group, stats in expected.snapshot().totals().items():
        if stats.get("sessions", 0.0) > 0:
            assert groups[group]["sessions"] == round(stats["sessions"])
            assert groups[group]["dcg"] == pytest.approx(stats["dcg"] / stats["sessions"], rel=1e-12)


@pytest.mark.parametrize("bad", ["0", "-1", "four", "10001"])
def test_replay_refuses_a_partition_count_that_is_not_one_to_ten_thousand(
        bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        replay_cli.build_parser().parse_args(["f.jsonl", "--partitions", bad])
    assert exit_.value.code == 2
    assert f"--partitions: a whole number from 1 to 10000, got '{bad}'" in capsys.readouterr().err


def test_produce_names_each_runs_sessions_by_its_seed_and_start(tmp_path: Path) -> None:
    base = SimConfig(seed=3, n_sessions=30, duration_s=600.0, start_ts=1_763_712_000.5)
    ids = {}
    for name, config, run in (("first", base, 0), ("forever's next", base, 1), ("another seed", SimConfig(
            seed=4, n_sessions=30, duration_s=600.0, start_ts=1_763_712_000.5), 0), ("another start", SimConfig(
            seed=3, n_sessions=30, duration_s=600.0, start_ts=1_763_712_001.5), 0)):
        ids[name] = {json.loads(e.value)["session_id"] for e in generate(run_config(config, run))
                     if e.topic == "impressions"}
    assert next(iter(ids["first"])).startswith("s3-1763712000500-")
    assert next(iter(ids["forever's next"])).startswith("s4-1763712600500-")
    names = list(ids)
    for i, a in enumerate(names):
        assert len(ids[a]) == 30
        for b in names[i + 1:]:
            assert not ids[a] & ids[b], (a, b)
    # the same seed and start: the same run, the same ids (a run can be produced again)
    assert ids["first"] == {json.loads(e.value)["session_id"] for e in generate(run_config(base, 0))
                            if e.topic == "impressions"}


def test_produce_writes_each_event_it_sends_in_order(tmp_path: Path) -> None:
    config = run_config(SimConfig(seed=1, n_sessions=50, duration_s=600.0, invalid_rate=0.1), 0)
    path = tmp_path / "sent.jsonl"
    sent = list(sent_events(config, str(path)))
    assert path.read_bytes() == b"".join(e.value + b"\n" for e in sent)
    assert any(e.expected_error is not None for e in sent)  # invalid events too: the worker got them
    assert sent == list(generate(config)) == list(sent_events(config, None))
    more = list(sent_events(run_config(config, 1), str(path), append=True))  # --forever's next run
    assert path.read_bytes() == b"".join(e.value + b"\n" for e in sent + more)
    with pytest.raises(ValueError, match="line break"):
        list(write_through([SimEvent("impressions", b"k", b'{"a":\n1}', 0.0)], io.BytesIO()))
    with pytest.raises(OSError):
        sent_events(config, str(tmp_path / "no-such-folder" / "x.jsonl"))
    assert build_parser().parse_args(["--write-events", str(path)]).write_events == str(path)


@pytest.mark.parametrize("seed", range(24))
def test_the_queries_read_for_a_batch_are_those_its_steps_sample(seed: int) -> None:
    """The Redis writer reads a query's judgments only for the queries :func:`sampled_queries` gives, from
    the state as read before the batch's steps: in ``sessions`` mode exactly the queries the steps sample,
    in ``judgments`` mode (or when every bucket has room for all of the batch) a superset (``may_sample`` at
    the batch's start). Whatever the spend, the buckets
    (carried or estimated from a sketch earlier batches filled), duplicates of earlier batches' sessions and
    of the batch's own, impressions too old for the watermark, late ones (the allowance read at each
    impression's own time), query judgments and undeclared variants."""
    from monitor.core.events import Annotation, Event, Impression, Label, Result
    from monitor.core.stream.admission import past_error
    from monitor.core.stream.counters import Counter
    from monitor.core.stream.held_grades import Labels
    from monitor.core.stream.join import step
    from monitor.core.stream.sampling import may_sample
    from monitor.core.stream.session import query_key
    from monitor.store.partition_state import PartitionState
    from monitor.store.prefetch import candidates, sampled_queries

    rng = random.Random(seed)
    unit = "sessions" if seed % 3 else "judgments"
    unlimited = seed % 8 == 7  # room for every impression in every bucket: the superset, no steps
    budget = ({b: 1e9 for b in ("head", "torso", "tail")} if unlimited else
              {"head": float(rng.choice([8, 12, 40])), "torso": float(rng.choice([0, 8, 12])),
               "tail": float(rng.choice([0, 8, 40]))})
    config = StreamConfig(budget=budget, budget_unit=unit, budget_period=600.0, head_min_frequency=8.0, torso_min_frequency=3.0)
    state = PartitionState()
    query_labels: dict[str, Labels] = {}

    def impression(session: str, ts: float) -> Impression:
        return Impression(session, f"q{rng.randrange(40)}", rng.choice(["r1", "r2"]), ts,
                          tuple(Result(f"d{j}", j + 1) for j in range(rng.randint(1, 6))),
                          variant=rng.choice([None, "canary", "other-arm"]),
                          query_bucket=rng.choice([None, None, "head", "torso", "tail"]))

    def run(events: list[Event]) -> set[str]:
        sampled: set[str] = set()
        for event in events:
            if past_error(event, state.watermark, config) is not None:  # a dead letter, as in the writer
                continue
            transition = step(event, state.load(event, query_labels, config, {}, {}), config, FOUR_LEVEL_SCALE,
                              PARTITIONS)
            state.apply(transition)
            if transition.query_labels is not None:
                key, labels = transition.query_labels
                query_labels[key] = {**query_labels.get(key, {}), **labels}
            if any(c.name == "sampled" for c, _ in transition.counters):
                assert isinstance(event, Impression)
                sampled.add(query_key(event.query))
                assert Counter("sampled", f"{transition.records[0].bucket}|{event.ranker}|"
                                          f"{event.variant or 'control'}") in dict(transition.counters)
        return sampled

    # an earlier batch: records (later duplicates), a sketch, a watermark
    run([impression(f"s{i}", 9_000.0 + i * 3.0) for i in range(150)])
    for bucket in ("head", "torso", "tail"):  # what earlier batches spent in this batch's periods
        for period in (16, 17):
            state.budget[(bucket, period)] = float(rng.randint(0, 3))
    events: list[Event] = []
    for i in range(300):
        ts = 10_000.0 + i * 3.0  # two budget periods (16 and 17)
        if rng.random() < 0.15:  # late: an earlier time, where the paced allowance was lower
            ts -= rng.uniform(0.0, 150.0)
        if rng.random() < 0.1:
            events.append(Annotation((Label("d1", FOUR_LEVEL_SCALE.parse(2)),), query=f"q{rng.randrange(12)}"))
            continue
        pick = rng.random()
        session = f"s{rng.randrange(150)}" if pick < 0.1 else f"t{rng.randrange(i + 1)}" if pick < 0.2 else f"t{i}"
        old = rng.random() < 0.03  # more than state_ttl behind the watermark: a dead letter
        events.append(impression(session, ts - config.state_ttl - 100.0 if old else ts))
    start = dict(state.budget)
    before = PartitionState(watermark=state.watermark, records=dict(state.records),
                            sketch={i: dict(c) for i, c in state.sketch.items()}, budget=dict(state.budget))
    read = sampled_queries(events, state, config, FOUR_LEVEL_SCALE, PARTITIONS)
    assert (state.watermark, state.records, state.sketch, state.budget) == (
        before.watermark, before.records, before.sketch, before.budget)  # nothing changed
    superset = candidates(events, start, config, PARTITIONS)
    assert superset == {query_key(e.query) for e in events
                        if isinstance(e, Impression) and may_sample(e, start, config, PARTITIONS)}
    sampled = run(events)
    if unit == "sessions" and not unlimited:
        assert read == sampled
        assert read <= superset
    else:
        assert read == superset and sampled <= read
    assert sampled
