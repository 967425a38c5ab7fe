"""A shadow candidate equal to the served ranker that shows documents nobody graded yet, with annotators
20-60 minutes late, leaves Alertmanager empty for 3 hours of traffic (issue 42), end to end on the real stack:
Kafka, Redis, a real ``monitor worker`` that alerts the real Alertmanager directly (its verdicts checked
every second while it works through the stream), and ``monitor canary``.

This is the case an independent world found firing: the served top 40 of a head session was often graded
already when its impression arrived, so it was scored at once, and the candidate's list was paired as soon
as most of *its* documents were graded, the ones nobody had graded yet at gain 0; the head regression alert
fired 14 minutes into the comparison. Now a session waits for the grades of the union of its lists, and a
look reads only settled epochs (docs/canary.md, "What a look reads").

The stream is :mod:`monitor.sim.flow`'s: a small head world (150 queries, k = 40), 2 hours of traffic served
by one ranker, then 3 hours with a shadow candidate of equal weight whose lists show 20% of their documents
under ids of their own (the same grades, ungraded until its sessions ask), traffic at 10x a budget of 400
sessions an hour, 4 partitions (as the topics), every request answered 20-60 minutes after its impression
(query-level grades, one event per request). The events are those the in-process pipeline took, in its
order; the worker, routing and sampling as it does, samples the same sessions (the replay-equals-worker
property), so the grades answer its requests. In process the same run looks every 5 minutes of event time
through an alert book: nothing fires there either.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim.flow import Annotators, Flow, run
from monitor.sim.flow_world import FlowWorld, Lister
from monitor.sim.world import World, WorldSettings
from tests.support.canary_e2e import ALERT_INTERVAL, alerts_about, canary_json, drained
from tests.support.worker_harness import Group, parse_metrics

pytestmark = pytest.mark.integration

STREAM = StreamConfig(budget={"head": 400.0, "torso": 400.0, "tail": 400.0})
LATE = Annotators(quick=1.0, slow=0.0, minutes_span=(1200.0, 3600.0))


@pytest.fixture
def groups() -> Iterator[list[Group]]:
    found: list[Group] = []
    yield found
    for group in found:
        assert group.restarts_seen() == []
        group.stop()


def test_an_equal_shadow_candidate_with_ungraded_documents_fires_nothing(
        groups: list[Group], kafka_bootstrap: str, redis_url: str, alertmanager_url: str,
        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    served, candidate = f"served-{tag}", f"fresh-{tag}"
    settings = WorldSettings(k=40, queries=150, zipf=0.8, outcomes=12, pool=80)
    world = FlowWorld.build(World.build("head", seed=3, settings=settings, night_dip=0.04),
                            (Lister(served), Lister(candidate, fresh=0.2)), seed=5)
    world.check(np.random.default_rng(0))
    flow = Flow("head", hours=3.0, warm=2.0, stream=STREAM, shadows=(candidate,), annotators=LATE)
    started = time.monotonic()
    in_process = run(world, flow, seed=7, record=True)
    assert in_process.alerts == []  # every 5 minutes of event time, through the alert book
    assert in_process.sessions >= 1800 and in_process.answered > 100
    events = in_process.events
    twins = sum(b't","position"' in e.value for e in events)  # impressions showing an ungraded twin
    assert twins > 300

    group, worker, sent = drained(groups, kafka_bootstrap, redis_url, alertmanager_url, tmp_path,
                                  f"fresh-{tag}", stream_toml(STREAM), events, STREAM.join_window)
    time.sleep(5 * ALERT_INTERVAL + 1)  # several verdict rounds after the whole stream
    assert alerts_about(group, candidate) == [] and alerts_about(group, served) == []
    status, rows = canary_json(group, candidate)
    assert status == 0, rows
    assert {(r["bucket"], r["metric"], r["kind"]) for r in rows} == {("head", "dcg", "shadow"),
                                                                      ("head", "pnr", "shadow")}, rows
    for row in rows:
        assert row["verdict"] != "regression" and row["n_candidate"] >= 200, row
        assert not any(c["flagged"] for c in row["checks"]), row
    samples = parse_metrics(worker.metrics_text())
    verdicts = [value for (name, labels), value in samples.items()
                if name == "search_relevance_canary_verdict" and dict(labels)["candidate"] == candidate]
    assert len(verdicts) == 2 and -1 not in verdicts, verdicts
    print(f"\n{sent} messages ({twins} impressions showing ungraded documents) in "
          f"{time.monotonic() - started:.0f} s; verdicts: "
          + "; ".join(f"{r['metric']} {r['verdict']} {r['estimate']:+.1%}" for r in rows
                      if r["estimate"] is not None) + "; no alert")
