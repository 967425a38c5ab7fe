"""The worker's HTTP endpoints (aiohttp, in the worker's event loop).

* ``GET /metrics``: the relevance and canary series and the join's health, as the rollup holds them (the
  shared state, computed by one worker, the exporter, and read by every scrape in one Redis command:
  :mod:`monitor.worker.rollup`), plus this process's pipeline health (consumed messages, consumer lag of
  its partitions) and the rollup's age;
* ``GET /healthz``: the process answers (liveness);
* ``GET /readyz``: Redis answers, the consumer has joined its group and the rollup is fresh (readiness),
  else 503 and why;
* ``POST /deploys``: a deploy event (the schema of the deploys topic), produced to the deploys topic;
  refused with 401 without ``Authorization: Bearer <token>`` when a token is configured.

The server knows the worker only through :class:`WorkerView` (the rollup, the pipeline view, readiness,
the deploy sink), so it runs, and is tested, without Faust, Kafka or Redis; the worker passes
:class:`monitor.worker.runtime.RuntimeView`, built from its ``Runtime``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from monitor.core.canary import Comparison
from monitor.core.decoding import decode_event
from monitor.core.events import Deploy, EventError
from monitor.core.stream.snapshot import Snapshot
from monitor.export.prometheus import RelevanceCollector
from monitor.export.verdict_gauges import CanaryCollector
from monitor.worker.metrics import PipelineCollector, PipelineView, RollupCollector, RollupView
from monitor.worker.rollup import Rollup
from monitor.worker.settings import WorkerSettings

log = logging.getLogger("monitor.worker")
MAX_BODY = 64 * 1024


class WorkerView(Protocol):
    """What the endpoints read from and send to the worker (the worker's: ``RuntimeView``, over Redis and
    Faust; a test's can read a ``MemoryPipeline``)."""

    async def rollup(self) -> Rollup | None:
        """What every worker exports alike (the read model, the canary verdicts, the join's health) as last
        computed; None before the first."""
        ...

    async def pipeline(self) -> PipelineView:
        """This process's pipeline health: consumed messages, consumer lag, retries, its exporter role."""
        ...

    async def problems(self) -> list[str]:
        """Why the worker is not ready (``redis: …``, ``kafka: …``, ``rollup: …``); empty when it is."""
        ...

    async def send_deploy(self, key: bytes, value: bytes) -> tuple[int | None, int | None]:
        """Produce a deploy event to the deploys topic, acknowledged; its (partition, offset)."""
        ...


@dataclass(frozen=True)
class Scrape:
    """What one scrape read (awaited before the registry is collected, which cannot await), and when."""

    rollup: Rollup | None
    pipeline: PipelineView
    now: float

    @property
    def snapshot(self) -> Snapshot:
        assert self.rollup is not None  # collected only through Present, which checks
        return self.rollup.shared.snapshot

    @property
    def verdicts(self) -> tuple[list[Comparison], list[Deploy]]:
        assert self.rollup is not None
        return self.rollup.shared.verdicts.comparisons, self.rollup.shared.verdicts.deploys


class Present(Collector):
    """``inner``'s series when ``present()``, else its families without samples (no rollup to export: no
    data, which is not zero; a counter never drops to 0 and back)."""

    def __init__(self, inner: RelevanceCollector | CanaryCollector, present: Callable[[], bool]) -> None:
        self.inner, self.present = inner, present

    def describe(self) -> Iterator[Metric]:
        yield from self.inner.describe()

    def collect(self) -> Iterator[Metric]:
        yield from (self.inner.collect() if self.present() else self.inner.describe())


class HttpServer:
    """The endpoints over a :class:`WorkerView`. The registry is built once: its collectors read the latest
    :class:`Scrape`, which each ``GET /metrics`` awaits from the view just before it collects them."""

    def __init__(self, view: WorkerView, settings: WorkerSettings) -> None:
        self.view, self.settings = view, settings
        self.latest: Scrape | None = None
        self.registry = CollectorRegistry()

        def present() -> bool:
            return self._scrape().rollup is not None

        relevance = RelevanceCollector(lambda: self._scrape().snapshot, settings.max_rankers,
                                       settings.max_variants)
        canary = CanaryCollector(lambda: self._scrape().verdicts, settings.max_rankers)
        self.registry.register(Present(relevance, present))
        self.registry.register(Present(canary, present))
        self.registry.register(PipelineCollector(self._pipeline))
        self.registry.register(RollupCollector(self._rollup_view))
        ProcessCollector(registry=self.registry)
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.add_routes([
            web.get("/metrics", self.metrics), web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz), web.post("/deploys", self.deploys),
        ])
        self.runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        settings = self.settings
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, settings.http_host, settings.http_port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else settings.http_port
        log.info("http: serving /metrics /healthz /readyz /deploys on %s:%s", settings.http_host, self.port)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    # -- endpoints ------------------------------------------------------------------------------------
    def _scrape(self) -> Scrape:
        if self.latest is None:
            raise RuntimeError("the registry was collected before a scrape was read (HttpServer.refresh)")
        return self.latest

    def _pipeline(self) -> PipelineView:
        """This process's view, with the shared health figures of the rollup (none without one)."""
        scrape = self._scrape()
        shared = scrape.rollup.shared if scrape.rollup is not None else None
        return replace(scrape.pipeline, waiting=shared.waiting if shared else None,
                       redis_memory=shared.redis_memory if shared else None)

    def _rollup_view(self) -> RollupView:
        scrape = self._scrape()
        rollup = scrape.rollup
        return RollupView(rollup.at if rollup else None, rollup.took if rollup else None, scrape.now,
                          scrape.pipeline.exporter, scrape.pipeline.rollups_computed)

    async def refresh(self) -> Scrape:
        """Read what the collectors export (for the worker: the rollup, one Redis command) and keep it."""
        rollup = await self.view.rollup()
        pipeline = await self.view.pipeline()
        self.latest = Scrape(rollup, pipeline, time.time())
        return self.latest

    async def metrics(self, request: web.Request) -> web.Response:
        await self.refresh()
        body = generate_latest(self.registry)  # no await in between: this scrape's values, consistent
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        problems = await self.view.problems()
        if problems:
            return web.json_response({"status": "not ready", "problems": problems}, status=503)
        return web.json_response({"status": "ready"})

    async def deploys(self, request: web.Request) -> web.Response:
        token = self.settings.deploy_token
        if token is not None:
            scheme, _, given = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode("utf-8", "replace"),
                                                                     token.encode()):
                return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"body larger than {MAX_BODY} bytes"}, status=413)
        try:
            event = decode_event(raw, self.settings.grade_scale())
        except EventError as error:
            return web.json_response({"error": str(error), "code": error.code}, status=400)
        if not isinstance(event, Deploy):
            return web.json_response({"error": "type: expected a deploy event", "code": "wrong_topic"},
                                     status=400)
        partition, offset = await self.view.send_deploy(event.ranker.encode(), raw)
        accepted: dict[str, object] = {"kind": event.kind, "ranker": event.ranker, "ts": event.ts}
        if event.share is not None:
            accepted["share"] = event.share
        body = {"accepted": accepted, "partition": partition, "offset": offset}
        return web.Response(status=202, text=json.dumps(body), content_type="application/json")
