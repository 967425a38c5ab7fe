"""The worker's HTTP endpoints (aiohttp, in the worker's event loop).

* ``GET /metrics``: every series, computed at scrape time from Redis (the relevance gauges, shared by all
  workers) plus this process's pipeline health (consumed messages, consumer lag of its partitions);
* ``GET /healthz``: the process answers (liveness);
* ``GET /readyz``: Redis answers and the consumer has joined its group (readiness), else 503 and why;
* ``POST /deploys``: a deploy event (the schema of the deploys topic), produced to the deploys topic;
  refused with 401 without ``Authorization: Bearer <token>`` when a token is configured.

The server knows the worker only through :class:`WorkerView` (the read model, the canary verdicts, the
pipeline view, readiness, the deploy sink), so it runs, and is tested, without Faust, Kafka or Redis; the
worker passes :class:`monitor.worker.runtime.RuntimeView`, built from its ``Runtime``.
"""

from __future__ import annotations

import hmac
import json
import logging
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from monitor.core.canary import Comparison
from monitor.core.decoding import decode_event
from monitor.core.events import Deploy, EventError
from monitor.export.canary import CanaryCollector
from monitor.export.prometheus import RelevanceCollector
from monitor.export.snapshot import Snapshot
from monitor.worker.canary import Verdicts
from monitor.worker.metrics import PipelineCollector, PipelineView
from monitor.worker.settings import WorkerSettings

log = logging.getLogger("monitor.worker")
MAX_BODY = 64 * 1024


class WorkerView(Protocol):
    """What the endpoints read from and send to the worker (the worker's: ``RuntimeView``, over Redis and
    Faust; a test's can read a ``MemoryPipeline``)."""

    async def snapshot(self) -> Snapshot:
        """The exporters' read model: the rolled-up state of the stream now."""
        ...

    async def verdicts(self) -> Verdicts:
        """The canary comparisons and every deploy (events and detected), by time."""
        ...

    async def pipeline(self) -> PipelineView:
        """This process's pipeline health: consumed messages, consumer lag, waiting sessions, retries."""
        ...

    async def problems(self) -> list[str]:
        """Why the worker is not ready (``redis: …``, ``kafka: …``); empty when it is."""
        ...

    async def send_deploy(self, key: bytes, value: bytes) -> tuple[int | None, int | None]:
        """Produce a deploy event to the deploys topic, acknowledged; its (partition, offset)."""
        ...


@dataclass(frozen=True)
class Scrape:
    """What one scrape read (awaited before the registry is collected, which cannot await)."""

    snapshot: Snapshot
    comparisons: list[Comparison]
    deploys: list[Deploy]
    pipeline: PipelineView


class HttpServer:
    """The endpoints over a :class:`WorkerView`. The registry is built once: its collectors read the latest
    :class:`Scrape`, which each ``GET /metrics`` awaits from the view just before it collects them."""

    def __init__(self, view: WorkerView, settings: WorkerSettings) -> None:
        self.view, self.settings = view, settings
        self.latest: Scrape | None = None
        self.registry = CollectorRegistry()
        self.registry.register(RelevanceCollector(lambda: self._scrape().snapshot, settings.max_rankers,
                                                  settings.max_variants))
        self.registry.register(CanaryCollector(lambda: (self._scrape().comparisons, self._scrape().deploys),
                                               settings.max_rankers))
        self.registry.register(PipelineCollector(lambda: self._scrape().pipeline))
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

    async def refresh(self) -> Scrape:
        """Read what the collectors export (the Redis reads, for the worker) and keep it for them."""
        snapshot = await self.view.snapshot()
        verdicts = await self.view.verdicts()
        pipeline = await self.view.pipeline()
        self.latest = Scrape(snapshot, verdicts.comparisons, verdicts.deploys, pipeline)
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
        body = {"accepted": {"kind": event.kind, "ranker": event.ranker, "ts": event.ts},
                "partition": partition, "offset": offset}
        return web.Response(status=202, text=json.dumps(body), content_type="application/json")
