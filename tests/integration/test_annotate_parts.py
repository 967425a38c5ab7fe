"""The bridge's pure parts, table-driven (no services): requests, grades from annotations, webhook bodies,
settings. The loop on real services is tests/integration/test_annotate_e2e.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.annotate.bridge import Pending, annotation_event
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.ratings import choice, ratings
from monitor.annotate.settings import AnnotateSettings, describe, load_annotate_settings
from monitor.annotate.tasks import (
    LABEL_CONFIG,
    WEBHOOK_ACTIONS,
    Document,
    GradeGiven,
    RequestError,
    grade_of_choice,
    pair_key,
    parse_request,
    request_document,
    task_data,
)
from monitor.annotate.webhook import WebhookError, items_of
from monitor.core.decoding import decode_event
from monitor.core.events import Annotation
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.worker.settings import SettingsError

REQUEST = {"type": "annotation_request", "schema": 1, "session_id": "s-1", "query": "蓝牙耳机",
           "query_bucket": "torso", "ranker": "r", "variant": "control", "k": 20, "doc_ids": ["d-4", "d-31"],
           "judged": 17, "ts": 1763712902.0}


def annotation(ident: int, choice: str, updated: str, **more: Any) -> dict[str, Any]:
    return {"id": ident, "updated_at": updated, "created_at": "2026-11-24T10:00:00Z", "completed_by": 3,
            "result": [{"from_name": "grade", "to_name": "query", "type": "choices",
                        "value": {"choices": [choice]}}], **more}


def test_the_labelling_config_offers_the_four_grades_with_english_names() -> None:
    for name, english in (("高", "high"), ("中", "medium"), ("低", "low"), ("无", "none")):
        assert f'alias="{name}"' in LABEL_CONFIG and f'value="{name} {english}' in LABEL_CONFIG
    assert 'name="query" value="$query"' in LABEL_CONFIG and 'value="$document"' in LABEL_CONFIG


def test_a_pair_has_one_key_whatever_the_session() -> None:
    assert pair_key("a b", "c") != pair_key("a", "b c")  # no ambiguity from joining
    assert len(pair_key("蓝牙耳机", "d-4")) == 24


def test_a_batch_of_requests_becomes_one_entry_per_pair_with_its_sessions() -> None:
    pending = Pending()
    pending.add(parse_request(json.dumps(REQUEST).encode()))
    pending.add(parse_request(json.dumps({**REQUEST, "session_id": "s-2", "doc_ids": ["d-31", "d-9"]}).encode()))
    assert [(doc, sessions) for _, doc, sessions in pending.pairs.values()] == [
        ("d-4", ["s-1"]), ("d-31", ["s-1", "s-2"]), ("d-9", ["s-2"])]
    data = task_data(REQUEST, "d-31", Document(title="Earbuds", url="https://x/d-31"), ["s-1", "s-2"])
    assert data["document"] == "Earbuds\nhttps://x/d-31\nid: d-31" and data["bucket"] == "torso"
    assert data["pair"] == pair_key("蓝牙耳机", "d-31") and data["session_count"] == 2


def test_every_repeat_of_a_pair_is_counted_as_asked_within_a_batch_too() -> None:
    pending = Pending()
    for session, docs in (("s-1", ["d-4", "d-31"]), ("s-2", ["d-31", "d-9"]), ("s-1", ["d-4"])):
        pending.add(parse_request(json.dumps({**REQUEST, "session_id": session, "doc_ids": docs}).encode()))
    assert pending.asked == 5 and len(pending.pairs) == 3  # 2 repeats within the batch


def test_a_request_may_carry_the_documents_text_and_the_settings_fill_the_gaps() -> None:
    request = {**REQUEST, "documents": {"d-4": {"title": "Earbuds", "snippet": "", "url": 7}, "d-31": "x"}}
    from_request = request_document(request, "d-4")
    assert from_request == Document(title="Earbuds")  # empty and non-string fields dropped
    assert request_document(request, "d-31") == request_document(REQUEST, "d-4") == Document()
    assert from_request.or_else(Document("T", "S", "https://x/d-4")) == Document("Earbuds", "S", "https://x/d-4")
    assert Document().shows_nothing() and not Document(url="https://x").shows_nothing()


def test_the_webhook_is_for_the_annotation_actions_only() -> None:
    assert set(WEBHOOK_ACTIONS) == {"ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED",
                                    "ANNOTATIONS_DELETED"}
    assert items_of({"action": "TASKS_CREATED", "tasks": [{"id": 1}]}, 1) is None  # ignored if sent anyway


def test_the_oldest_request_age_is_now_less_its_timestamp_and_0_when_none_is_held() -> None:
    registry = CollectorRegistry()
    now = [1000.0]
    metrics = BridgeMetrics(registry, clock=lambda: now[0])

    def age() -> float | None:
        return registry.get_sample_value("search_relevance_annotate_oldest_request_age_seconds")

    assert age() == 0.0
    metrics.holding(940.0)
    now[0] = 1003.5
    assert age() == 63.5
    metrics.holding(None)
    assert age() == 0.0
    metrics.backlog.set(12)
    assert registry.get_sample_value("search_relevance_annotate_backlog_requests") == 12


@pytest.mark.parametrize(("raw", "message"), [
    (b"\xff", "not JSON"), (b"[]", "not an annotation_request"),
    (json.dumps({**REQUEST, "query": ""}).encode(), "query"),
    (json.dumps({**REQUEST, "doc_ids": []}).encode(), "doc_ids"),
    (json.dumps({**REQUEST, "doc_ids": [1]}).encode(), "doc_ids"),
    (json.dumps({k: v for k, v in REQUEST.items() if k != "session_id"}).encode(), "session_id"),
])
def test_unusable_requests_are_refused_with_the_reason(raw: bytes, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_request(raw)


@pytest.mark.parametrize(("choice", "grade"), [
    ("高", "高"), ("中 medium: partly relevant", "中"), ("无", "无"), ("high", None), ("", None)])
def test_a_choice_is_a_grade_by_its_alias_or_shown_value(choice: str, grade: str | None) -> None:
    assert grade_of_choice(choice) == grade


def _current(annotations: list[dict[str, Any]]) -> GradeGiven | None:
    return choice(ratings(annotations))


def test_one_annotators_grade_is_the_annotation_they_changed_last() -> None:
    first = annotation(1, "低", "2026-11-24T10:00:00Z")
    later = annotation(2, "高", "2026-11-24T11:00:00.5Z")
    corrected = annotation(1, "中", "2026-11-24T12:00:00Z")
    assert _current([]) is None
    assert _current([first, later]) == GradeGiven(2, "高", 1795518000.5, 3)
    assert _current([corrected, later]).grade == "中"  # type: ignore[union-attr]
    assert _current([later]).grade == "高"  # type: ignore[union-attr]  # 1 deleted: falls back
    skipped = {**annotation(3, "无", "2026-11-24T13:00:00Z"), "was_cancelled": True}
    no_choice = {**annotation(4, "无", "2026-11-24T13:00:00Z"), "result": []}
    naive = annotation(5, "无", "2026-11-24T13:00:00")
    assert _current([skipped, no_choice, naive, later]).annotation_id == 2  # type: ignore[union-attr]


def test_an_annotation_event_is_a_valid_query_level_annotation() -> None:
    raw = annotation_event("蓝牙耳机", "d-4", GradeGiven(7, "中", 1795950000.5, 3), 11)
    event = decode_event(raw, FOUR_LEVEL_SCALE)
    assert isinstance(event, Annotation) and event.query == "蓝牙耳机" and event.session_id is None
    assert event.labels[0].doc_id == "d-4" and event.labels[0].grade.name == "中" and event.ts == 1795950000.5
    assert json.loads(raw)["annotation"] == 7 and json.loads(raw)["task"] == 11


def test_in_session_scope_the_event_is_the_session_s_own_annotation() -> None:
    raw = annotation_event("蓝牙耳机", "d-4", GradeGiven(7, "低", 1795950000.5, None), 11, session_id="s-9")
    event = decode_event(raw, FOUR_LEVEL_SCALE)
    assert isinstance(event, Annotation) and event.session_id == "s-9" and event.query is None
    assert event.labels[0].grade.name == "低" and not event.from_query and "annotator" not in json.loads(raw)


@pytest.mark.parametrize(("body", "items"), [
    ({"action": "ANNOTATION_CREATED", "annotation": {"id": 5, "task": 9}, "task": {"id": 9}}, [("task", 9)]),
    ({"action": "ANNOTATION_UPDATED", "annotation": {"id": 5, "task": 9}}, [("task", 9)]),
    ({"action": "ANNOTATIONS_CREATED", "annotation": [{"id": 5, "task": 9}], "task": [{"id": 9}, {"id": 10}]},
     [("task", 9), ("task", 10)]),
    ({"action": "ANNOTATIONS_DELETED", "annotations": [{"id": 5}, {"id": 6}]},
     [("annotation", 5), ("annotation", 6)]),
    ({"action": "PROJECT_UPDATED", "project": {"id": 1}}, None),
    ({"action": "ANNOTATION_CREATED", "project": {"id": 99}, "task": {"id": 9}}, None),  # another project
])
def test_webhook_bodies_name_what_to_sync(body: dict[str, Any], items: Any) -> None:
    assert items_of(body, 1) == items


@pytest.mark.parametrize("body", [
    [], {"action": 3}, {"action": "ANNOTATION_CREATED"}, {"action": "ANNOTATION_CREATED", "task": {"id": "9"}},
    {"action": "ANNOTATIONS_DELETED", "annotations": [{"id": True}]}, {"action": "ANNOTATIONS_DELETED"},
])
def test_malformed_webhook_bodies_are_refused(body: Any) -> None:
    with pytest.raises(WebhookError):
        items_of(body, 1)


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"MONITOR_LABEL_STUDIO_URL": "http://127.0.0.1:8080/", "MONITOR_LABEL_STUDIO_TOKEN": "tok-123",
            "MONITOR_ANNOTATE_SECRET": "sec-456", **more}


def test_settings_with_secrets_from_files_never_shown(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok-from-file\n")
    (tmp_path / "docs.jsonl").write_text('{"doc_id": "d-1", "title": "Earbuds"}\n\n')
    settings = load_annotate_settings({
        **{k: v for k, v in env(tmp_path).items() if k != "MONITOR_LABEL_STUDIO_TOKEN"},
        "MONITOR_LABEL_STUDIO_TOKEN_FILE": str(tmp_path / "token"), "MONITOR_ANNOTATE_PORT": "9999",
        "MONITOR_ANNOTATE_DOCUMENTS": str(tmp_path / "docs.jsonl"), "MONITOR_ANNOTATE_DOC_URL": "https://x/{doc_id}"})
    assert isinstance(settings, AnnotateSettings)
    assert settings.label_studio_token == "tok-from-file" and settings.label_studio_url == "http://127.0.0.1:8080"
    assert settings.webhook_url == "http://127.0.0.1:9999/webhook"
    assert settings.document("d-1") == Document(title="Earbuds", url="https://x/d-1")
    shown = repr(settings) + json.dumps(describe(settings))
    assert "tok-from-file" not in shown and "sec-456" not in shown


@pytest.mark.parametrize(("change", "message"), [
    ({"MONITOR_LABEL_STUDIO_URL": "ftp://x"}, "MONITOR_LABEL_STUDIO_URL must be an http"),
    ({"MONITOR_ANNOTATE_SECRET": ""}, "MONITOR_ANNOTATE_SECRET .or MONITOR_ANNOTATE_SECRET_FILE. must be set"),
    ({"MONITOR_LABEL_STUDIO_TOKEN_FILE": "/nonexistent"}, "give MONITOR_LABEL_STUDIO_TOKEN or"),
    ({"MONITOR_ANNOTATE_PORT": "http"}, "MONITOR_ANNOTATE_PORT: must be an integer"),
    ({"MONITOR_ANNOTATE_RECONCILE_INTERVAL": "0"}, "MONITOR_ANNOTATE_RECONCILE_INTERVAL: must be a positive"),
    ({"MONITOR_ANNOTATE_SCOPE": "document"}, "MONITOR_ANNOTATE_SCOPE: must be one of query, session"),
    ({"MONITOR_ANNOTATE_IMPORT_SIZE": "0"}, "MONITOR_ANNOTATE_IMPORT_SIZE: must be an integer in 1..10000"),
    ({"MONITOR_ANNOTATE_IMPORT_SIZE": "many"}, "MONITOR_ANNOTATE_IMPORT_SIZE: must be an integer"),
])
def test_bad_settings_name_the_setting(tmp_path: Path, change: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_annotate_settings({**env(tmp_path), **change})


def test_the_compose_annotate_profile_runs_the_bridge_with_valid_settings(tmp_path: Path) -> None:
    """docker-compose.yml's ``annotate`` profile: Label Studio and the bridge, whose environment (with the
    token and secret given) is a valid bridge configuration pointing at the compose services."""
    from tests.support.compose import COMPOSE_FILE, compose_command

    command, compose_env = compose_command(tmp_path / "docker-config")
    compose_env = {**compose_env, "LABEL_STUDIO_USER_TOKEN": "tok-abc", "MONITOR_ANNOTATE_SECRET": "sec-def"}
    done = subprocess.run([*command, "-f", str(COMPOSE_FILE), "--profile", "annotate", "config", "--format", "json"],
                          capture_output=True, text=True, env=compose_env, timeout=120)
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    assert services["label-studio"]["image"].startswith("heartexlabs/label-studio:1.23")
    assert services["annotate"]["command"] == ["monitor", "annotate"]
    environment = {k: str(v) for k, v in services["annotate"]["environment"].items()}
    settings = load_annotate_settings(environment)
    assert settings.label_studio_url == "http://label-studio:8080" and settings.secret == "sec-def"
    assert settings.webhook_url == "http://annotate:9465/webhook" and settings.worker.kafka_bootstrap == "kafka:9092"
    assert environment["MONITOR_TOPIC_REQUESTS"] == "annotation-requests"


@pytest.mark.integration  # real Redis: the bridge's pair→task map and sent grades
@pytest.mark.parametrize(("scope", "store"), [("query", "redis"), ("session", "redis"), ("session", "cluster")])
async def test_a_fallback_after_a_deletion_is_sent_so_that_the_stream_takes_it(
        request: pytest.FixtureRequest, scope: str, store: str) -> None:
    """The stream keeps the grade with the latest ``ts`` (docs/events.md), so the bridge never sends a
    pair's grade with a ``ts`` earlier than the last one it sent: when the later annotation is deleted,
    the older one is sent again with the deleted one's ``ts`` (a tie, which the later delivered wins), and
    the session's DCG follows it. On a Redis Cluster too: the project's keys share its hash tag, so the
    transaction writing ``sent`` and ``sent_ts`` is one slot's."""
    import math
    import types
    import uuid

    from prometheus_client import CollectorRegistry

    from monitor.annotate.bridge import Bridge
    from monitor.annotate.metrics import BridgeMetrics
    from monitor.core.stream.config import StreamConfig
    from monitor.store.client import connect
    from monitor.store.memory import MemoryPipeline
    from tests.support.streams import impression

    produced: list[tuple[bytes, bytes]] = []

    async def produce(key: bytes, value: bytes) -> None:
        produced.append((key, value))

    settings = types.SimpleNamespace(redis_prefix=f"test-{uuid.uuid4().hex[:8]}", scope=scope, overlap_share=0.0,
                                     gold={}, agreement_window=86400.0)
    redis = connect(request.getfixturevalue("redis_url" if store == "redis" else "redis_cluster_url"))
    try:
        bridge = Bridge(settings, None, redis, produce, BridgeMetrics(CollectorRegistry()))  # type: ignore[arg-type]
        bridge.project = 1
        assert bridge._key("sent").endswith(":{1}:sent" if store == "cluster" else ":1:sent")
        await redis.sadd(bridge._key(f"sessions:{pair_key('耳机', 'd-1')}"), "s-1")
        data = {"query": "耳机", "doc_id": "d-1", "sessions": ["s-1"]}
        first = annotation(1, "高", "2026-11-24T10:00:00Z")
        second = annotation(2, "无", "2026-11-24T11:00:00Z")
        assert await bridge.sync_task(7, {"data": data, "annotations": [first, second]})
        assert await bridge.sync_task(7, {"data": data, "annotations": [first]})  # the second deleted
        assert not await bridge.sync_task(7, {"data": data, "annotations": [first]})  # nothing new
        assert await redis.hlen(bridge._key("sent")) == await redis.hlen(bridge._key("sent_ts")) == 1
    finally:
        await redis.aclose()
    sent = [json.loads(value) for _, value in produced]
    assert [e["grades"][0]["grade"] for e in sent] == ["无", "高"]
    assert sent[1]["ts"] == sent[0]["ts"] == 1795518000.0  # not the first annotation's own 10:00

    pipeline = MemoryPipeline(StreamConfig(join_window=300, min_coverage=0.5), FOUR_LEVEL_SCALE, clock=lambda: None)
    pipeline.submit("impressions", b"s-1", impression("s-1", 1000.0, ["d-1"], query="耳机"))
    for key, value in produced:
        pipeline.submit("annotations", key, value)
    pipeline.advance(math.inf)
    summary = pipeline.windows()[("1h", "tail|r1|control")]
    assert summary["sessions"] == 1 and summary["dcg"] == pytest.approx(1.0)  # 高 at rank 1, not 无
