"""The worker's HTTP endpoints over its interface (:class:`WorkerView`), without Faust, Kafka or Redis
(issue 16, part 3): the view here reads a :class:`MemoryPipeline` run over a small simulated stream.

* ``GET /metrics`` exports what the in-process pipeline's collectors export (relevance, canary and pipeline
  series, with the settings' label caps), plus the rollup's and the process series; a later scrape sees
  the stream's later state through the same registry, which was built once and reads the view once per
  scrape; without a rollup the shared series have no samples (their families are still described);
* ``GET /healthz`` answers ok; ``GET /readyz`` answers 200 or 503 with the view's problems;
* ``POST /deploys`` hands a valid deploy to the view's sink, bytes as sent, and answers with its partition
  and offset.

The token and the validation of ``POST /deploys`` are tested on a real worker
(tests/integration/test_worker_http.py); so are readiness before the consumer joins and ``/metrics`` on
real Kafka and Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.core.canary import comparisons, every_deploy
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.export.prometheus import RelevanceCollector
from monitor.export.verdict_gauges import CanaryCollector
from monitor.sim import SimConfig, SimEvent, simulate
from monitor.store.memory import MemoryPipeline
from monitor.worker.http import HttpServer, WorkerView
from monitor.worker.metrics import PipelineCollector, PipelineView
from monitor.worker.rollup import Rollup, RollupBody
from monitor.worker.settings import WorkerSettings
from monitor.worker.verdicts import Verdicts

on_the_fixtures_loop = pytest.mark.asyncio(loop_scope="session")  # the fixtures' loop (pyproject.toml)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
ROLLUP_SERIES = ("search_relevance_rollup_", "search_relevance_rollups_")
SETTINGS = WorkerSettings(max_rankers=1, max_variants=1)  # the canary's ranker: other
WAITING, MEMORY, AT = 4, 1 << 20, 1_763_800_000.0
VIEW = PipelineView(consumed={"impressions": 120, "annotations": 300}, lag={("impressions", 1): 7},
                    waiting=None, redis_memory=None, redis_retries=1, quiet_closed=2, processing_retries=3,
                    exporter=True, rollups_computed=5)
SHARED_VIEW = replace(VIEW, waiting=WAITING, redis_memory=MEMORY)  # what a scrape exports: with the rollup's


class MemoryView:
    """A :class:`WorkerView` over the in-process pipeline; records what the server asked of it."""

    def __init__(self, memory: MemoryPipeline) -> None:
        self.memory = memory
        self.not_ready: list[str] = []
        self.sent: list[tuple[bytes, bytes]] = []
        self.reads: list[str] = []

        self.no_rollup = False

    async def rollup(self) -> Rollup | None:
        self.reads.append("rollup")
        if self.no_rollup:
            return None
        shared = RollupBody(self.memory.snapshot(), verdicts_of(self.memory), WAITING, MEMORY)
        return Rollup(shared, AT, 0.25, AT + 20.0, "memory")

    async def pipeline(self) -> PipelineView:
        self.reads.append("pipeline")
        return VIEW

    async def problems(self) -> list[str]:
        return list(self.not_ready)

    async def send_deploy(self, key: bytes, value: bytes) -> tuple[int | None, int | None]:
        self.sent.append((key, value))
        return 3, 41


def verdicts_of(memory: MemoryPipeline) -> Verdicts:
    """What ``monitor.worker.verdicts.current`` computes, from the in-process state."""
    deploys = sorted((d for d in memory.deploys if isinstance(d, Deploy)), key=lambda d: d.ts)
    history = memory.history()
    every = every_deploy(history, deploys)
    return Verdicts(comparisons(history, deploys, SETTINGS.canary()), every)


def parse(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def exported(memory: MemoryPipeline) -> Samples:
    """What the in-process pipeline's collectors export now, in a fresh registry (what /metrics must hold
    besides the process series)."""
    snapshot, verdicts = memory.snapshot(), verdicts_of(memory)
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(lambda: snapshot, SETTINGS.max_rankers, SETTINGS.max_variants))
    registry.register(CanaryCollector(lambda: (verdicts.comparisons, verdicts.deploys), SETTINGS.max_rankers))
    registry.register(PipelineCollector(lambda: SHARED_VIEW))
    return parse(generate_latest(registry).decode())


def submit(memory: MemoryPipeline, events: list[SimEvent]) -> None:
    for event in events:
        memory.submit(event.topic, event.key, event.value)


@pytest.fixture(scope="module")
def stream() -> list[SimEvent]:
    result = simulate(SimConfig(seed=7, n_sessions=300, duration_s=3 * 3600, invalid_rate=0.05))
    return result.events


@pytest.fixture
def view() -> MemoryView:
    return MemoryView(MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, partitions=4))


@pytest.fixture
async def client(view: MemoryView) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    async with TestClient(TestServer(HttpServer(view, SETTINGS).app)) as client:
        yield client


def test_the_server_imports_no_faust_or_kafka_client() -> None:
    code = ("import sys, monitor.worker.http; "
            "print(sorted({'faust', 'aiokafka', 'monitor.worker.runtime'} & set(sys.modules)))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_building_the_server_reads_nothing(view: MemoryView) -> None:
    typed: WorkerView = view  # MemoryView is a WorkerView (for mypy, were tests checked)
    server = HttpServer(typed, SETTINGS)
    assert server.latest is None and view.reads == []
    with pytest.raises(RuntimeError, match="before a scrape"):
        generate_latest(server.registry)


@on_the_fixtures_loop
async def test_metrics_export_what_the_in_process_pipeline_exports(
        client: TestClient, view: MemoryView, stream: list[SimEvent]) -> None:  # type: ignore[type-arg]
    done = 0
    for upto in (len(stream) // 2, len(stream)):  # the same registry, two states of the stream
        submit(view.memory, stream[done:upto])
        done = upto
        answer = await client.get("/metrics")
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=")
        samples = parse(await answer.text())
        expected = exported(view.memory)
        rollup = {key: value for key, value in samples.items() if key[0].startswith(ROLLUP_SERIES)}
        assert {key: value for key, value in samples.items()
                if not key[0].startswith(("process_", *ROLLUP_SERIES))} == expected
        assert any(name.startswith("process_") for name, _ in samples)
        assert rollup[("search_relevance_rollup_timestamp_seconds", ())] == AT
        assert rollup[("search_relevance_rollup_age_seconds", ())] > 0  # AT is in the past
        assert rollup[("search_relevance_rollup_duration_seconds", ())] == 0.25
        assert rollup[("search_relevance_rollup_exporter", ())] == 1.0
        assert rollup[("search_relevance_rollups_computed_total", ())] == 5
    # not vacuous: scored sessions, canary verdicts, capped rankers, dead letters, the pipeline view
    names = {name for name, _ in expected}
    assert {"search_relevance_dcg", "search_relevance_canary_verdict", "search_relevance_dead_letters_total",
            "search_relevance_deploy_timestamp_seconds", "search_relevance_consumer_lag"} <= names
    assert any(dict(labels).get("ranker") == "other" for _, labels in expected)
    assert view.reads == ["rollup", "pipeline"] * 2  # once per scrape, before collecting


@on_the_fixtures_loop
async def test_without_a_rollup_the_shared_series_have_no_samples(
        client: TestClient, view: MemoryView, stream: list[SimEvent]) -> None:  # type: ignore[type-arg]
    submit(view.memory, stream)
    view.no_rollup = True
    answer = await client.get("/metrics")
    assert answer.status == 200
    text = await answer.text()
    samples = parse(text)
    names = {name for name, _ in samples}
    assert "# TYPE search_relevance_dcg gauge" in text and "# TYPE search_relevance_canary_verdict gauge" in text
    assert not {n for n in names if n.startswith("search_relevance_") and not n.startswith(ROLLUP_SERIES)} - {
        "search_relevance_events_total", "search_relevance_consumer_lag", "search_relevance_redis_retries_total",
        "search_relevance_quiet_closes_total", "search_relevance_processing_retries_total",
        "search_relevance_label_waits_total"}
    assert ("search_relevance_rollup_age_seconds", ()) not in samples
    assert samples[("search_relevance_rollup_exporter", ())] == 1.0
    view.no_rollup = False  # the same registry exports the rollup once there is one
    samples = parse(await (await client.get("/metrics")).text())
    assert ("search_relevance_dcg_ci_lower" in {name for name, _ in samples}
            and samples[("search_relevance_waiting_sessions", ())] == WAITING)


@on_the_fixtures_loop
async def test_healthz_and_readyz(client: TestClient, view: MemoryView) -> None:  # type: ignore[type-arg]
    health = await client.get("/healthz")
    assert (health.status, await health.json()) == (200, {"status": "ok"})
    ready = await client.get("/readyz")
    assert (ready.status, await ready.json()) == (200, {"status": "ready"})
    view.not_ready = ["redis: ConnectionError", "kafka: not in the consumer group yet (or rebalancing)"]
    ready = await client.get("/readyz")
    assert (ready.status, await ready.json()) == (503, {"status": "not ready", "problems": view.not_ready})
    assert view.reads == []  # neither reads the stream


@on_the_fixtures_loop
async def test_a_valid_deploy_goes_to_the_sink(client: TestClient, view: MemoryView) -> None:  # type: ignore[type-arg]
    raw = json.dumps({"type": "deploy", "kind": "canary_start", "ranker": "bm25-v2", "ts": 1_763_800_000.5,
                      "previous": "bm25-v1"}).encode()
    answer = await client.post("/deploys", data=raw, headers={"Content-Type": "application/json"})
    assert answer.status == 202
    assert await answer.json() == {"accepted": {"kind": "canary_start", "ranker": "bm25-v2",
                                                "ts": 1_763_800_000.5}, "partition": 3, "offset": 41}
    assert view.sent == [(b"bm25-v2", raw)]  # keyed by ranker, the bytes as sent


@on_the_fixtures_loop
async def test_a_deploy_with_a_share_goes_to_the_sink_with_it(client: TestClient, view: MemoryView) -> None:  # type: ignore[type-arg]
    """A declared share (a canary's start, a ramp step) passes through as sent, and the answer names it."""
    for kind, share in (("canary_start", 0.05), ("canary_share", 0.2)):
        raw = json.dumps({"type": "deploy", "kind": kind, "ranker": "bm25-v2", "ts": 1_763_800_000.5,
                          "share": share}).encode()
        answer = await client.post("/deploys", data=raw, headers={"Content-Type": "application/json"})
        assert answer.status == 202
        assert (await answer.json())["accepted"] == {"kind": kind, "ranker": "bm25-v2", "ts": 1_763_800_000.5,
                                                     "share": share}
        assert view.sent[-1] == (b"bm25-v2", raw)
    refused = await client.post("/deploys", data=b'{"type":"deploy","kind":"canary_share","ranker":"r","ts":1}')
    assert (refused.status, await refused.json()) == (400, {"error": "share: missing", "code": "missing_field"})
    assert len(view.sent) == 2
