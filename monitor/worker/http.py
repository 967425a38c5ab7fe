"""The worker's HTTP endpoints (aiohttp, in the worker's event loop).

* ``GET /metrics``: every series, computed at scrape time from Redis (the relevance gauges, shared by all
  workers) plus this process's pipeline health (consumed messages, consumer lag of its partitions);
* ``GET /healthz``: the process answers (liveness);
* ``GET /readyz``: Redis answers and the consumer has joined its group (readiness), else 503 and why;
* ``POST /deploys``: a deploy event (the schema of the deploys topic), produced to the deploys topic;
  refused with 401 without ``Authorization: Bearer <token>`` when a token is configured.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from monitor.core.events import Deploy, EventError, decode_event
from monitor.export.canary import CanaryCollector
from monitor.export.prometheus import RelevanceCollector
from monitor.worker.canary import current
from monitor.worker.metrics import PipelineCollector, PipelineView

if TYPE_CHECKING:
    from monitor.worker.runtime import Runtime

log = logging.getLogger("monitor.worker")
MAX_BODY = 64 * 1024


class HttpServer:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.add_routes([
            web.get("/metrics", self.metrics), web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz), web.post("/deploys", self.deploys),
        ])
        self.runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        settings = self.runtime.settings
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
    async def metrics(self, request: web.Request) -> web.Response:
        runtime = self.runtime
        settings = runtime.settings
        snapshot = await runtime.state.snapshot()
        waiting, memory = await runtime.state.health()
        registry = CollectorRegistry()
        registry.register(RelevanceCollector(lambda: snapshot, settings.max_rankers, settings.max_variants))
        verdicts = await current(runtime.state, settings.canary())
        registry.register(CanaryCollector(lambda: (verdicts.comparisons, verdicts.deploys),
                                          settings.max_rankers))
        registry.register(PipelineCollector(lambda: PipelineView(
            consumed=dict(runtime.processor.consumed), lag=self._lag(), waiting=waiting, redis_memory=memory,
            redis_retries=runtime.processor.retries, quiet_closed=runtime.processor.quiet_closed,
            processing_retries=runtime.processor.processing_retries)))
        ProcessCollector(registry=registry)
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _lag(self) -> dict[tuple[str, int], int]:
        runtime = self.runtime
        out: dict[tuple[str, int], int] = {}
        try:
            consumer = runtime.app.consumer
            assigned = consumer.assignment()
        except Exception:  # not started yet
            return out
        sources = runtime.settings.topics.sources()
        for tp in assigned:
            if tp.topic not in sources:
                continue
            try:
                end = consumer.highwater(tp)
            except Exception:
                continue
            if end is None:
                continue
            done = runtime.processor.positions.get((tp.topic, tp.partition), -1) + 1
            out[(tp.topic, tp.partition)] = max(int(end) - done, 0)
        return out

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        problems = []
        try:
            await self.runtime.redis.ping()
        except Exception as error:
            problems.append(f"redis: {type(error).__name__}")
        if not self.runtime.consuming():
            problems.append("kafka: not in the consumer group yet (or rebalancing)")
        if problems:
            return web.json_response({"status": "not ready", "problems": problems}, status=503)
        return web.json_response({"status": "ready"})

    async def deploys(self, request: web.Request) -> web.Response:
        token = self.runtime.settings.deploy_token
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
            event = decode_event(raw, self.runtime.settings.grade_scale())
        except EventError as error:
            return web.json_response({"error": str(error), "code": error.code}, status=400)
        if not isinstance(event, Deploy):
            return web.json_response({"error": "type: expected a deploy event", "code": "wrong_topic"},
                                     status=400)
        sink = self.runtime.app.topic(self.runtime.settings.topics.deploys, key_type=bytes, value_type=bytes,
                                      key_serializer="raw", value_serializer="raw")
        sent = await sink.send(key=event.ranker.encode(), value=raw)
        metadata: Any = await sent
        body = {"accepted": {"kind": event.kind, "ranker": event.ranker, "ts": event.ts},
                "partition": getattr(metadata, "partition", None),
                "offset": getattr(metadata, "offset", None)}
        return web.Response(status=202, text=json.dumps(body), content_type="application/json")
