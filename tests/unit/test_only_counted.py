"""The worker's lean path for impressions it only counts (``PartitionState.count_only`` and
``Batch.add_counted``) gives exactly what the full step gives: the same commit, the same state after.

Most of real traffic is impressions that are not sampled; the Redis writer takes them without building a
``Loaded``, a ``step`` and a ``Transition`` (issue 19). Here random streams (impressions with and without a
bucket, undeclared variants, duplicates, labels of sampled sessions, sessions closing, small budgets that run
out within the stream) go through the writer's loop twice, once with the lean path and once with the full
step for every event, and the commits (``Batch.ops``) and the states must be equal.
"""

from __future__ import annotations

import copy
import random

import pytest

from monitor.core.events import Annotation, Event, Impression, Label, Result
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.held_grades import Labels, SharedGrades
from monitor.core.stream.join import step
from monitor.core.stream.session import query_key
from monitor.store.batch import Batch
from monitor.store.keys import Keys
from monitor.store.partition_state import PartitionState
from monitor.store.scripts import merged_shared


def _stream(rng: random.Random, n: int) -> list[Event]:
    events: list[Event] = []
    ts = 10_000.0
    shown: list[Impression] = []
    for i in range(n):
        ts += rng.expovariate(1 / 30.0) - (rng.random() < 0.1) * 200  # some arrive late
        if shown and rng.random() < 0.15:  # labels for a session seen before (sampled or not)
            seen = rng.choice(shown)
            events.append(Annotation(tuple(Label(r.doc_id, FOUR_LEVEL_SCALE.parse(rng.randint(0, 3)))
                                           for r in seen.results[:rng.randint(1, 5)]), seen.session_id))
            continue
        if shown and rng.random() < 0.03:  # a duplicate
            events.append(rng.choice(shown))
            continue
        if rng.random() < 0.02:  # labels before their impression
            events.append(Annotation((Label("d0", FOUR_LEVEL_SCALE.parse(2)),), f"s{i + 1}"))
        query = f"q{int(rng.paretovariate(1.2)) % 40}"
        impression = Impression(
            f"s{i}", query, rng.choice(["r1", "r2"]), ts,
            tuple(Result(f"d{j}", j + 1, 1.0 / (j + 1)) for j in range(rng.randint(3, 12))),
            variant=rng.choice([None, "control", "canary", "other-arm"]),
            query_bucket=rng.choice([None, None, "head", "torso", "tail"]))
        shown.append(impression)
        events.append(impression)
    return events


def _run(events: list[Event], config: StreamConfig, judged: dict[str, Labels], lean: bool,
         start: PartitionState) -> tuple[PartitionState, Batch, int]:
    """The writer's loop (monitor/store/writer.py): the lean path first when ``lean``."""
    state = copy.deepcopy(start)
    batch = Batch(0)
    shared: dict[str, SharedGrades] = {}
    taken = 0
    for event in events:
        if lean and isinstance(event, Impression):
            counted = state.count_only(event, config, 4)
            if counted is not None:
                batch.add_counted(state.watermark, counted)
                taken += 1
                continue
        loaded = state.load(event, judged, config, shared, {})
        transition = step(event, loaded, config, FOUR_LEVEL_SCALE, 4)
        state.apply(transition)
        if transition.shared is not None:
            shared[transition.shared[0]] = merged_shared(shared.get(transition.shared[0], {}),
                                                         transition.shared)
        batch.add(transition, config)
    return state, batch, taken


def _view(state: PartitionState) -> tuple[object, ...]:
    return (state.watermark, {s: r.to_json() for s, r in state.records.items()}, state.early,
            state.deadlines, sorted(state.heap), state.sketch, state.budget)


@pytest.mark.parametrize("seed", range(12))
def test_the_lean_path_commits_what_the_full_step_commits(seed: int) -> None:
    rng = random.Random(seed)
    config = StreamConfig(budget={"head": 8.0, "torso": 8.0, "tail": 12.0}, join_window=600.0,
                          budget_period=1800.0, head_min_frequency=20.0, torso_min_frequency=4.0,
                          budget_unit=rng.choice(["sessions", "judgments"]))
    judged = {query_key(f"q{i}"): {"d0": 3, "d1": 1} for i in (3, 7)}
    start = PartitionState()
    if seed % 2:  # a state a batch would read: a pending session, waiting labels, spent budget
        warm = _run(_stream(random.Random(seed + 100), 60), config, judged, lean=False, start=start)
        start = warm[0]
    events = _stream(rng, 400)
    full_state, full_batch, none = _run(events, config, judged, lean=False, start=start)
    lean_state, lean_batch, taken = _run(events, config, judged, lean=True, start=start)
    assert none == 0
    assert taken > 150, "the lean path must take most impressions of such a stream"
    keys = Keys("t")
    full_ops, lean_ops = full_batch.ops(keys, config, {"impressions": 9}), lean_batch.ops(
        keys, config, {"impressions": 9})
    assert (lean_ops.keys, lean_ops.ops, lean_ops.values) == (full_ops.keys, full_ops.ops, full_ops.values)
    assert _view(lean_state) == _view(full_state)
    # the commit covers the epochs' impressions (the canary's sample-ratio check): per declared group, the
    # epochs' impressions sum to its impressions counter; the undeclared (``other``) add none
    in_epochs: dict[str, float] = {}
    lean, full = lean_batch.aggregates, full_batch.aggregates
    for groups in lean.epochs.values():
        for group, stats in groups.items():
            if "impressions" in stats:
                in_epochs[group] = in_epochs.get(group, 0.0) + stats["impressions"]
    counters = {c.group: n for c, n in lean.counters.items() if c.name == "impressions"}
    assert in_epochs == {g: n for g, n in counters.items() if not g.endswith("|other")}
    assert lean.epochs == full.epochs and sum(in_epochs.values()) > taken


def test_the_lean_path_declines_what_the_step_must_see() -> None:
    config = StreamConfig(budget={"head": 0.0, "torso": 0.0, "tail": 0.0})
    shown = (Result("a", 1), Result("b", 2))
    state = PartitionState()
    plain = Impression("s1", "q", "r1", 100.0, shown, query_bucket="tail")
    counted = state.count_only(plain, config, 1)
    assert counted is not None and counted.group == "tail|r1|control" and state.watermark == 100.0
    assert state.count_only(Impression("s2", "q", "r1", 1.0, shown, variant="blue"), config, 1) is None
    state.early["s3"] = {"a": 2}
    assert state.count_only(Impression("s3", "q", "r1", 1.0, shown), config, 1) is None
    before = copy.deepcopy(state)
    state.heap.append((50.0, "s9"))
    assert state.count_only(Impression("s4", "q", "r1", 60.0, shown), config, 1) is None
    assert (state.watermark, state.sketch) == (before.watermark, before.sketch)  # declined: nothing changed
