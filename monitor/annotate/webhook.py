"""The bridge's HTTP endpoints (aiohttp): ``POST /webhook`` (from Label Studio), ``/metrics``, ``/healthz``.

A webhook must carry the shared secret in ``X-Monitor-Annotate-Secret`` (compared in constant time), else
401 and nothing else happens. A body that is not a JSON object with an ``action``, or an annotation
action that names no task, is answered 400, logged and counted (``outcome="invalid"``); other actions
(the webhook is set up for the annotation actions only, but one made by hand may send projects, tasks,
label links) and other projects' events are answered 200 and counted as ``ignored``.
An accepted delivery only queues the task (or, for deletions, the annotation), once while it waits:
:meth:`BridgeHttp.drain` syncs queued tasks with Label Studio after the answer, several at a time, so a
slow Label Studio never holds up its own webhook call.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from monitor.annotate.bridge import Bridge
from monitor.annotate.client import LabelStudioError
from monitor.annotate.settings import SECRET_HEADER
from monitor.annotate.tasks import ANNOTATION_ACTIONS, DELETE_ACTION

log = logging.getLogger("monitor.annotate")
MAX_BODY = 4 * 1024 * 1024

#: what a webhook asks to sync: ("task", id) or ("annotation", id)
Item = tuple[str, int]
#: syncs run at once: each is a request or two to Label Studio, and one at a time fell behind the
#: default budget's grades (benchmarks/annotate_loop.py: 370 of 1,860 annotations sent in 4 minutes)
DRAIN_WORKERS = 4


class WebhookError(ValueError):
    """A webhook body the bridge cannot use."""


def _ids(value: Any, where: str) -> list[int]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        found = item.get("id") if isinstance(item, dict) else item
        if not isinstance(found, int) or isinstance(found, bool):
            raise WebhookError(f"{where}: expected an id")
        out.append(found)
    return out


def items_of(body: Any, project: int | None) -> list[Item] | None:
    """What to sync for a webhook body: a list, or None if the action is not one the bridge follows."""
    if not isinstance(body, dict) or not isinstance(body.get("action"), str):
        raise WebhookError("expected a JSON object with an 'action'")
    action = body["action"]
    if action not in ANNOTATION_ACTIONS and action != DELETE_ACTION:
        return None
    where = body.get("project")
    if project is not None and isinstance(where, dict) and where.get("id") not in (None, project):
        return None
    if action == DELETE_ACTION:
        return [("annotation", i) for i in _ids(body.get("annotations"), "annotations")]
    if body.get("task") is not None:
        return [("task", i) for i in _ids(body["task"], "task")]
    annotations = body.get("annotation")
    annotations = annotations if isinstance(annotations, list) else [annotations]
    tasks = [a.get("task") for a in annotations if isinstance(a, dict)]
    if not tasks:
        raise WebhookError("annotation: names no task")
    return [("task", i) for i in _ids(tasks, "annotation.task")]


class BridgeHttp:
    def __init__(self, bridge: Bridge, registry: CollectorRegistry, secret: str) -> None:
        self.bridge = bridge
        self.registry = registry
        self._secret = secret.encode()
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self._waiting: set[Item] = set()
        self._busy = 0
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.add_routes([web.post("/webhook", self.webhook), web.get("/metrics", self.metrics),
                             web.get("/healthz", self.healthz)])

    async def webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not given or not hmac.compare_digest(given, self._secret):
            self.bridge.metrics.webhooks.labels(outcome="unauthorized").inc()
            return web.json_response({"error": f"missing or wrong {SECRET_HEADER}"}, status=401)
        try:
            body = json.loads(await request.read())
            items = items_of(body, self.bridge.project)
        except (ValueError, UnicodeDecodeError) as error:  # WebhookError is a ValueError
            self.bridge.metrics.webhooks.labels(outcome="invalid").inc()
            log.warning("webhook refused: %s", str(error)[:200])
            return web.json_response({"error": str(error)[:200]}, status=400)
        if items is None:
            self.bridge.metrics.webhooks.labels(outcome="ignored").inc()
            return web.json_response({"ignored": True})
        for item in items:
            self.queue_item(item)
        self.bridge.metrics.webhooks.labels(outcome="accepted").inc()
        return web.json_response({"queued": len(items)})

    async def metrics(self, request: web.Request) -> web.Response:
        try:  # the rater-quality gauges from Redis; if it cannot answer, the last values stand
            await self.bridge.refresh_quality()
        except Exception as error:  # Redis down: the rest of /metrics still says so
            log.warning("rater quality not refreshed (%s)", type(error).__name__)
        response = web.Response(body=generate_latest(self.registry))
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "project": self.bridge.project})

    def queue_item(self, item: Item) -> None:
        """Queue ``item`` unless it is already waiting (a sync reads the task's whole state, so one
        waiting sync covers every webhook of the task delivered before it starts)."""
        if item not in self._waiting:
            self._waiting.add(item)
            self.queue.put_nowait(item)

    async def drain(self, workers: int = DRAIN_WORKERS) -> None:
        """Sync queued tasks with Label Studio with ``workers`` at once, for ever (one task's syncs run
        one at a time: :meth:`Bridge.sync_task` holds a lock per task)."""
        await asyncio.gather(*(self._drain_one() for _ in range(workers)))

    def idle(self) -> bool:
        """Nothing queued and nothing being synced."""
        return self.queue.empty() and not self._busy

    async def _drain_one(self) -> None:
        """Sync each queued item; an item that fails waits and is queued again."""
        while True:
            kind, ident = await self.queue.get()
            self._waiting.discard((kind, ident))
            self._busy += 1
            try:
                await self._sync(kind, ident)
            finally:
                self._busy -= 1

    async def _sync(self, kind: str, ident: int) -> None:
        try:
            task_id = ident if kind == "task" else await self.bridge.task_of_annotation(ident)
            if task_id is None:
                log.info("deleted annotation %s belongs to no known task; ignored", ident)
                return
            await self.bridge.sync_task(task_id)
        except LabelStudioError as error:
            self.bridge.metrics.label_studio_errors.inc()
            log.warning("Label Studio: %s; task sync retried in 2 s", error)
            await asyncio.sleep(2.0)
            self.queue_item((kind, ident))
        except Exception as error:  # Kafka or Redis: keep the item, try again
            log.warning("syncing %s %s failed (%s); retried in 2 s", kind, ident, type(error).__name__)
            await asyncio.sleep(2.0)
            self.queue_item((kind, ident))
