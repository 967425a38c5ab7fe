"""``MONITOR_ANNOTATE_SCOPE=session`` on real Kafka, Redis and Label Studio (no worker needed).

The bridge starts first and makes the topics with the worker's partitions (3 here, not a broker's
default of 1); its backlog and oldest request's age go back to 0 once the tasks exist. Requests are written straight to the requests topic: s-1 asks for d-1 and d-2, s-2 for d-2 and d-3, so
three tasks. Grading d-2 in Label Studio gives one session annotation each to s-1 and s-2 (keyed by the
session). A later request of s-3 for d-2 (already graded) gives s-3 the grade without a new task; the
same request again gives nothing more.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)
from tests.support.annotate import Bridge, grade, requests_consumed, wait_for
from tests.support.worker_harness import Group, Stream, read_topic

pytestmark = pytest.mark.integration


def request(session_id: str, docs: list[str]) -> bytes:
    return json.dumps({"type": "annotation_request", "schema": 1, "session_id": session_id, "query": "耳机",
                       "query_bucket": "head", "ranker": "r", "variant": "control", "k": 10, "doc_ids": docs,
                       "judged": 0, "ts": 1763712902.0}, ensure_ascii=False).encode()


async def send(bootstrap: str, topic: str, values: list[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in values:
            await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await producer.stop()


def partitions(bootstrap: str, topic: str) -> int | None:
    """The topic's partition count, None if it does not exist (listed first: no auto-creation)."""

    async def count() -> int | None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            if topic not in await admin.list_topics():
                return None
            (meta,) = await admin.describe_topics([topic])
            return len(meta["partitions"])
        finally:
            await admin.close()

    return asyncio.run(count())


def test_session_scope_gives_each_asking_session_the_grade_once(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path,
        label_studio: LabelStudioHandle) -> None:  # noqa: F811 (the fixture)
    handle = label_studio
    group = Group(Stream(kafka_bootstrap, partitions=3), redis_url, tmp_path, "scope")
    topic = group.outputs.requests
    bridge = Bridge(group, handle, tmp_path)
    bridge.extra = {"MONITOR_ANNOTATE_SCOPE": "session"}

    def events() -> list[tuple[bytes | None, dict[str, Any]]]:
        return [(k, json.loads(v)) for k, v, _ in read_topic(kafka_bootstrap, group.outputs.annotations)]

    try:
        bridge.start()  # before any worker: it makes the topics, with the worker's partitions
        project = wait_for("the project", lambda: handle.project_id(group.app_id), bridge=bridge)
        wait_for("the requests topic", lambda: partitions(kafka_bootstrap, topic) is not None, bridge=bridge)
        assert partitions(kafka_bootstrap, topic) == 3
        asyncio.run(send(kafka_bootstrap, topic, [("s-1", request("s-1", ["d-1", "d-2"])),
                                                  ("s-2", request("s-2", ["d-2", "d-3"]))]))
        wait_for("three tasks", lambda: len(handle.tasks(project)) == 3, bridge=bridge)
        def caught_up() -> dict[str, float] | None:
            found = bridge.metrics()
            done = found.get("search_relevance_annotate_tasks_created_total") == 3 and \
                found.get("search_relevance_annotate_backlog_requests") == 0 and \
                found.get("search_relevance_annotate_oldest_request_age_seconds") == 0
            return found if done else None

        metrics = wait_for("the backlog back at 0", caught_up, bridge=bridge)
        assert metrics["search_relevance_annotate_pairs_requested_total"] == 4
        assert metrics["search_relevance_annotate_pairs_already_tasked_total"] == 1  # d-2, asked twice
        task = next(t for t in handle.tasks(project) if t["data"]["doc_id"] == "d-2")
        grade(handle, int(task["id"]), "中")
        wait_for("a grade for each asking session", lambda: len(events()) == 2, bridge=bridge)
        asyncio.run(send(kafka_bootstrap, topic, [("s-3", request("s-3", ["d-2"]))]))
        wait_for("the grade for the later session", lambda: len(events()) == 3, bridge=bridge)
        asyncio.run(send(kafka_bootstrap, topic, [("s-3", request("s-3", ["d-2"]))]))  # seen twice
        wait_for("the repeat read", lambda: requests_consumed(kafka_bootstrap, group), bridge=bridge)
        time.sleep(1)
        got = events()
        assert len(got) == 3 and len(handle.tasks(project)) == 3
        assert sorted(k for k, _ in got) == [b"s-1", b"s-2", b"s-3"]
        for key, event in got:
            assert event["session_id"] == key.decode() and "query" not in event  # type: ignore[union-attr]
            assert event["grades"] == [{"doc_id": "d-2", "grade": "中"}] and event["task"] == task["id"]
    finally:
        bridge.stop()
