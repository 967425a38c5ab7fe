"""Bulk task creation against a real Label Studio and a real Redis (issue 30): one import per
``import_size`` new pairs, each pair's task recorded under its own key, every repeat counted, tasks with
nothing to show counted and warned about, a failed import that Label Studio applied all the same not
repeated, and the webhook set up for the annotation actions only.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.annotate.bridge import Bridge
from monitor.annotate.client import LabelStudio, LabelStudioError
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.settings import AnnotateSettings
from monitor.annotate.tasks import WEBHOOK_ACTIONS, pair_key
from monitor.store.client import connect
from monitor.worker.settings import WorkerSettings
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def request(session: str, query: str, docs: Sequence[str], documents: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"type": "annotation_request", "schema": 1, "session_id": session, "query": query,
                            "query_bucket": "head", "ranker": "r", "variant": "control", "k": 10,
                            "doc_ids": list(docs), "judged": 0, "ts": 1763712902.0}
    if documents is not None:
        body["documents"] = documents
    return json.dumps(body, ensure_ascii=False).encode()


class LostAnswer(LabelStudio):
    """Label Studio's client whose first import is applied but its answer lost (as after a timeout)."""

    lost = 0

    async def import_tasks(self, project: int, datas: Sequence[dict[str, Any]]) -> list[int]:
        ids = await super().import_tasks(project, datas)
        if not self.lost:
            self.lost = len(ids)
            raise LabelStudioError("POST /api/projects/…/import: Label Studio unreachable (TimeoutError)")
        return ids


def settings(handle: LabelStudioHandle, redis_url: str, **more: Any) -> AnnotateSettings:
    tag = uuid.uuid4().hex[:8]
    worker = replace(WorkerSettings(), redis_url=redis_url, redis_prefix=f"test-{tag}")
    return AnnotateSettings(worker=worker, label_studio_url=handle.url, label_studio_token=handle.access_token,
                            secret="sec", project=f"bulk {tag}", webhook_url="http://127.0.0.1:9/webhook",
                            **more)


async def test_a_batch_becomes_imports_of_new_pairs_with_every_repeat_counted(
        label_studio: LabelStudioHandle, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    handle = label_studio
    config = settings(handle, redis_url, import_size=4)
    redis = connect(redis_url)
    registry = CollectorRegistry()
    try:
        async with LabelStudio(handle.url, handle.access_token) as ls:
            bridge = Bridge(config, ls, redis, _no_grades, BridgeMetrics(registry))
            project = await bridge.setup()
            titled = {"d-1": {"title": "Earbuds"}, "d-2": {"snippet": "40 h battery"}, "d-3": {"url": "https://x/3"}}
            # 6 new pairs asked 9 times in one batch: (耳机, d-1..d-4) and (音箱, d-1, d-5); d-4, d-5 have no text
            first = [request("s-1", "耳机", ["d-1", "d-2", "d-3"], titled),
                     request("s-2", "耳机", ["d-2", "d-4"], titled),
                     request("s-3", "音箱", ["d-1", "d-5"], titled),
                     request("s-4", "耳机", ["d-1", "d-4"])]
            with caplog.at_level(logging.WARNING, logger="monitor.annotate"):
                await bridge.handle_requests(first)
                # the next batch: two known pairs and one new
                await bridge.handle_requests([request("s-5", "耳机", ["d-3", "d-6"], titled),
                                              request("s-6", "音箱", ["d-5"])])
            tasks = {t["data"]["pair"]: t for t in handle.tasks(project)}
            webhooks = handle.api("GET", f"/api/webhooks?project={project}")
    finally:
        await redis.aclose()

    def value(name: str) -> float:
        found = registry.get_sample_value(f"search_relevance_annotate_{name}_total")
        assert found is not None, name
        return found

    pairs = {pair_key(q, d) for q, d in [("耳机", "d-1"), ("耳机", "d-2"), ("耳机", "d-3"), ("耳机", "d-4"),
                                         ("音箱", "d-1"), ("音箱", "d-5"), ("耳机", "d-6")]}
    assert set(tasks) == pairs  # one task per pair, whatever the repeats
    recorded = await _recorded(redis_url, bridge)
    assert recorded == {pair: int(task["id"]) for pair, task in tasks.items()}  # each id under its own pair
    assert value("tasks_created") == 7 and value("task_imports") == 3  # 6 new in imports of 4, then 1
    assert value("pairs_requested") == 12 and value("pairs_already_tasked") == 12 - 7  # within a batch too
    shown = {t["data"]["doc_id"]: t["data"]["document"] for t in tasks.values() if t["data"]["query"] == "耳机"}
    assert shown["d-1"] == "Earbuds\nid: d-1" and shown["d-2"] == "40 h battery\nid: d-2"
    assert shown["d-3"] == "https://x/3\nid: d-3" and shown["d-4"] == "id: d-4"
    assert value("tasks_without_text") == 3  # (耳机, d-4), (音箱, d-5), (耳机, d-6)
    warnings = [r.getMessage() for r in caplog.records if "NOTHING TO SHOW" in r.getMessage()]
    assert len(warnings) == 1 and "'d-4'" in warnings[0]  # the first, then once per 1,000
    assert len(webhooks) == 1 and webhooks[0]["send_for_all_actions"] is False
    assert sorted(webhooks[0]["actions"]) == sorted(WEBHOOK_ACTIONS)
    assert "TASKS_CREATED" not in webhooks[0]["actions"]


async def test_a_failed_import_that_was_applied_is_not_imported_again(
        label_studio: LabelStudioHandle, redis_url: str) -> None:  # noqa: F811
    handle = label_studio
    config = settings(handle, redis_url)
    redis = connect(redis_url)
    registry = CollectorRegistry()
    try:
        async with LostAnswer(handle.url, handle.access_token) as ls:
            bridge = Bridge(config, ls, redis, _no_grades, BridgeMetrics(registry))
            project = await bridge.setup()
            await bridge.handle_requests([request(f"s-{i}", f"q-{i}", ["d-1", "d-2"]) for i in range(5)])
            assert ls.lost == 10
        tasks = handle.tasks(project)
        recorded = await _recorded(redis_url, bridge)
    finally:
        await redis.aclose()
    assert len(tasks) == 10 and recorded == {t["data"]["pair"]: int(t["id"]) for t in tasks}
    assert registry.get_sample_value("search_relevance_annotate_label_studio_errors_total") == 1
    assert registry.get_sample_value("search_relevance_annotate_task_imports_total") == 0  # none needed


async def test_an_old_webhook_for_every_action_is_narrowed_to_the_annotation_actions(
        label_studio: LabelStudioHandle, redis_url: str) -> None:  # noqa: F811
    handle = label_studio
    config = settings(handle, redis_url)
    redis = connect(redis_url)
    try:
        async with LabelStudio(handle.url, handle.access_token) as ls:
            bridge = Bridge(config, ls, redis, _no_grades, BridgeMetrics(CollectorRegistry()))
            project = await ls.find_or_create_project(config.project, "<View></View>")
            handle.api("POST", "/api/webhooks", {"project": project, "url": config.webhook_url,
                                                 "send_for_all_actions": True, "send_payload": True})
            assert await bridge.setup() == project
    finally:
        await redis.aclose()
    hooks = handle.api("GET", f"/api/webhooks?project={project}")
    assert len(hooks) == 1 and hooks[0]["send_for_all_actions"] is False
    assert sorted(hooks[0]["actions"]) == sorted(WEBHOOK_ACTIONS)


async def _no_grades(key: bytes, value: bytes) -> None:
    raise AssertionError("no grade is produced here")


async def _recorded(redis_url: str, bridge: Bridge) -> dict[str, int]:
    redis = connect(redis_url)
    try:
        found = await redis.hgetall(bridge._key("tasks"))
    finally:
        await redis.aclose()
    return {k.decode(): int(v) for k, v in found.items()}
