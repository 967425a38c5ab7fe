"""The annotation loop end to end: real Kafka, Redis, ``monitor worker``, ``monitor annotate`` and Label Studio.

1. Query-level judgments for two documents of each of eight queries, then 48 impression sessions (each
   shows six of a query's ten documents) go to the worker, which samples every session and requests the
   documents not judged yet.
2. ``monitor annotate`` creates exactly one Label Studio task per unjudged (query, document) pair, however
   many sessions asked for it; it is SIGKILLed while it creates them and restarted: still one task each.
3. The test grades the tasks through Label Studio's API as an annotator would; half of them while the
   bridge is killed (their webhooks are lost; the restarted bridge finds them by reconciliation).
4. The grades arrive on the annotations topic exactly once each (query-level, ``ts`` = the annotation's
   time); after a flush the worker's ``/metrics`` DCG equals an offline recomputation of every session
   from the grades given (``monitor.core.metrics.gain.dcg``).
5. A grade changed in Label Studio corrects the gauge; a second annotator's grade, deleted again, leaves
   the pair with the latest remaining one (sent again) and the gauge where it was.
6. Bad webhooks: no or a wrong secret (401), a malformed body (400), an unknown action (ignored): counted,
   nothing produced, the bridge still runs.
7. Label Studio down: new requests wait (the bridge's backlog and oldest request's age say so); when it is
   back their tasks are created, and no task's creation called the webhook.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from monitor.core.metrics.gain import dcg
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim.records import SimEvent
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)
from tests.support.annotate import SECRET, Bridge, grade, requests_consumed, wait_for
from tests.support.worker_harness import Group, Stream, flush_events, http_request, parse_metrics, read_topic

pytestmark = pytest.mark.integration

GAIN = {"高": 1.0, "中": 0.7, "低": 0.3, "无": 0.0}
NAMES = list(GAIN)
CONFIG_TOML = stream_toml(StreamConfig(join_window=1800, min_coverage=0.8, max_closes_per_step=1_000_000,
                                       budget={"head": 1e9, "torso": 1e9, "tail": 1e9}))
QUERIES = 8
SESSIONS = 48


def traffic(start: float, seed: int = 18) -> tuple[list[SimEvent], list[SimEvent], dict[str, dict[str, str]],
                                                  dict[str, tuple[str, list[str]]]]:
    """Judgments (docs 0-1 of each query), impressions (six of ten documents each), the judged grades per
    query, and each session's (query, shown documents in rank order)."""
    rng = random.Random(seed)
    judged: dict[str, dict[str, str]] = {}
    judgments = []
    for q in range(QUERIES):
        query = f"蓝牙耳机 {q}"
        judged[query] = {f"q{q}-d{m}": rng.choice(NAMES) for m in range(2)}
        value = json.dumps({"type": "annotation", "query": query, "grades": [
            {"doc_id": d, "grade": g} for d, g in judged[query].items()]}, ensure_ascii=False).encode()
        judgments.append(SimEvent("annotations", query.encode(), value, start))
    impressions = []
    sessions: dict[str, tuple[str, list[str]]] = {}
    for i in range(SESSIONS):
        q = i % QUERIES
        query, sid = f"蓝牙耳机 {q}", f"ann-{i}"
        docs = rng.sample([f"q{q}-d{m}" for m in range(10)], 6)
        sessions[sid] = (query, docs)
        ts = start + i
        value = json.dumps({"type": "impression", "session_id": sid, "query": query, "query_bucket": "tail",
                            "ranker": "ranker-a", "variant": "control", "ts": ts,
                            "results": [{"doc_id": d, "position": p + 1, "score": 1 - p / 10}
                                        for p, d in enumerate(docs)]}, ensure_ascii=False).encode()
        impressions.append(SimEvent("impressions", sid.encode(), value, ts))
    return judgments, impressions, judged, sessions


def bridge_events(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [json.loads(v) for _, v, _ in read_topic(bootstrap, topic)
            if json.loads(v).get("source") == "label-studio"]


def expected_dcg(sessions: dict[str, tuple[str, list[str]]], grades: dict[tuple[str, str], str]) -> float:
    values = [dcg([GAIN[grades[(query, d)]] for d in docs], 20) for query, docs in sessions.values()]
    return sum(values) / len(values)


def tail_series(worker_metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
                k: bool = True) -> float:
    labels = {"bucket": "tail", "ranker": "ranker-a", "variant": "control", "window": "24h"}
    if k:
        labels["k"] = "20"
    return worker_metrics[(name, tuple(sorted(labels.items())))]


def test_requests_become_tasks_and_grades_come_back_as_the_gauge(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path, group_factory: list[Group],
        label_studio: LabelStudioHandle) -> None:  # noqa: F811 (the fixture)
    handle = label_studio
    stream = Stream(kafka_bootstrap)
    group = Group(stream, redis_url, tmp_path, "annotate", CONFIG_TOML)
    group_factory.append(group)
    start = time.time() - 600
    judgments, impressions, judged, sessions = traffic(start)

    # 1. the worker samples every session and requests the documents not judged yet
    assert stream.send(judgments) == len(judgments)
    worker = group.start()
    group.drain(timeout=300, settle=1.0)
    assert stream.send(impressions) == len(impressions)
    group.drain(timeout=300, settle=1.0)
    requests = [json.loads(v) for _, v, _ in read_topic(kafka_bootstrap, group.outputs.requests)]
    unjudged = {(query, d) for query, docs in sessions.values() for d in docs if d not in judged[query]}
    assert {(r["query"], d) for r in requests for d in r["doc_ids"]} == unjudged
    assert len({r["session_id"] for r in requests}) == SESSIONS
    assert sum(len(r["doc_ids"]) for r in requests) > len(unjudged)  # pairs asked by several sessions

    # 2. one task per unjudged pair; the bridge killed while it creates them and restarted
    bridge = Bridge(group, handle, tmp_path)
    bridge.extra = {"MONITOR_ANNOTATE_IMPORT_SIZE": "5"}  # 13 imports: a kill lands between two of them
    try:
        bridge.start()
        project = wait_for("the project", lambda: handle.project_id(group.app_id), bridge=bridge)
        wait_for("some tasks", lambda: len(handle.tasks(project)) >= 5, bridge=bridge)
        bridge.kill()
        created_before_kill = len(handle.tasks(project))
        bridge.start()
        wait_for("a task per pair", lambda: len(handle.tasks(project)) >= len(unjudged), bridge=bridge)
        # every request read again and committed by the restarted bridge (after its group's rebalance)
        wait_for("the requests consumed", lambda: requests_consumed(kafka_bootstrap, group), bridge=bridge)
        tasks = handle.tasks(project)
        pairs = Counter((t["data"]["query"], t["data"]["doc_id"]) for t in tasks)
        assert set(pairs) == unjudged and set(pairs.values()) == {1}, (created_before_kill, pairs.most_common(3))
        for task in tasks:
            data = task["data"]
            assert data["bucket"] == "tail" and data["sessions"] and data["url"].endswith(data["doc_id"])
            assert data["query"] in data["document"] or data["doc_id"] in data["document"]

        # 3. grades through Label Studio's API: the first half with the bridge up (webhooks), the second
        # while it is killed (webhooks lost: found by the reconciliation at its restart)
        rng = random.Random(7)
        given: dict[tuple[str, str], str] = {}
        by_pair = {(t["data"]["query"], t["data"]["doc_id"]): int(t["id"]) for t in tasks}
        ordered = sorted(by_pair.items())
        half = len(ordered) // 2
        annotation_of: dict[tuple[str, str], int] = {}
        for pair, task_id in ordered[:half]:
            given[pair] = rng.choice(NAMES)
            annotation_of[pair] = grade(handle, task_id, given[pair])
        wait_for("the first half of the grades", lambda: len(bridge_events(
            kafka_bootstrap, group.outputs.annotations)) >= half, bridge=bridge)
        bridge.kill()
        for pair, task_id in ordered[half:]:
            given[pair] = rng.choice(NAMES)
            annotation_of[pair] = grade(handle, task_id, given[pair])
        bridge.start()
        wait_for("every grade", lambda: len(bridge_events(
            kafka_bootstrap, group.outputs.annotations)) >= len(ordered), bridge=bridge)
        time.sleep(3)

        # 4. each grade exactly once, query-level, ts = the annotation's time; then the gauge
        events = bridge_events(kafka_bootstrap, group.outputs.annotations)
        assert len(events) == len(ordered)
        assert {(e["query"], e["grades"][0]["doc_id"]): e["grades"][0]["grade"] for e in events} == given
        assert all("session_id" not in e and abs(e["ts"] - time.time()) < 600 for e in events)
        assert {e["annotation"] for e in events} == set(annotation_of.values())
        grades = {**given, **{(q, d): g for q, docs in judged.items() for d, g in docs.items()}}
        flush = flush_events(stream, start + SESSIONS + 1801, prefix="annflush")
        assert stream.send(flush) == len(flush)
        group.drain(timeout=300, settle=2.0)
        metrics = parse_metrics(worker.metrics_text())
        assert tail_series(metrics, "search_relevance_sessions_scored", k=False) == SESSIONS
        assert tail_series(metrics, "search_relevance_dcg") == pytest.approx(expected_dcg(sessions, grades),
                                                                             abs=1e-9)

        # 5. a changed grade in Label Studio corrects the gauge
        pair = next(p for p in ordered if given[p[0]] != "高")[0]
        handle.api("PATCH", f"/api/annotations/{annotation_of[pair]}", {"result": [
            {"from_name": "grade", "to_name": "query", "type": "choices", "value": {"choices": ["高"]}}]})
        grades[pair] = "高"
        wait_for("the correction", lambda: len(bridge_events(
            kafka_bootstrap, group.outputs.annotations)) == len(ordered) + 1, bridge=bridge)
        for_pair = sorted((e for e in bridge_events(kafka_bootstrap, group.outputs.annotations)
                           if (e["query"], e["grades"][0]["doc_id"]) == pair), key=lambda e: e["ts"])
        assert [e["grades"][0]["grade"] for e in for_pair] == [given[pair], "高"]  # a later grade: a correction
        assert for_pair[0]["annotation"] == for_pair[1]["annotation"] and for_pair[0]["ts"] < for_pair[1]["ts"]
        group.drain(timeout=300, settle=2.0)
        want = expected_dcg(sessions, grades)
        wait_for("the corrected gauge", lambda: tail_series(parse_metrics(worker.metrics_text()),
                 "search_relevance_dcg") == pytest.approx(want, abs=1e-9), seconds=60)

        # 5b. a second annotator's grade, then deleted in Label Studio: the pair's grade falls back to the
        # latest remaining annotation (sent again with the deleted one's ts, a tie the later delivered wins:
        # its own older ts would lose to the latest-ts rule), and the gauge with it
        def pair_grades() -> list[str]:  # in the order produced (one key, so one partition)
            return [e["grades"][0]["grade"] for e in bridge_events(kafka_bootstrap, group.outputs.annotations)
                    if (e["query"], e["grades"][0]["doc_id"]) == pair]

        second = grade(handle, by_pair[pair], "无")
        wait_for("the second annotator's grade", lambda: pair_grades() == [given[pair], "高", "无"], bridge=bridge)
        handle.api("DELETE", f"/api/annotations/{second}")
        wait_for("the fallback after the deletion", lambda: pair_grades() == [given[pair], "高", "无", "高"],
                 bridge=bridge)
        group.drain(timeout=300, settle=2.0)
        wait_for("the gauge after the deletion", lambda: tail_series(parse_metrics(worker.metrics_text()),
                 "search_relevance_dcg") == pytest.approx(want, abs=1e-9), seconds=60)

        # 6. bad webhooks: refused or counted, nothing produced, the bridge still runs
        produced = len(bridge_events(kafka_bootstrap, group.outputs.annotations))
        body = json.dumps({"action": "ANNOTATION_CREATED", "task": {"id": by_pair[pair]}}).encode()
        assert http_request(f"{bridge.url}/webhook", body).status == 401
        assert http_request(f"{bridge.url}/webhook", body, {"X-Monitor-Annotate-Secret": "wrong"}).status == 401
        ok = {"X-Monitor-Annotate-Secret": SECRET, "Content-Type": "application/json"}
        assert http_request(f"{bridge.url}/webhook", b"{not json", ok).status == 400
        assert http_request(f"{bridge.url}/webhook", b'["a list"]', ok).status == 400
        assert http_request(f"{bridge.url}/webhook", b'{"action": "ANNOTATION_CREATED", "task": {"id": "x"}}',
                            ok).status == 400
        assert http_request(f"{bridge.url}/webhook", b'{"action": "PROJECT_UPDATED"}', ok).status == 200
        assert http_request(f"{bridge.url}/webhook", body, ok).status == 200  # a repeat: no new grade
        time.sleep(2)
        counted = bridge.metrics()
        assert counted["search_relevance_annotate_webhooks_total{unauthorized}"] == 2
        assert counted["search_relevance_annotate_webhooks_total{invalid}"] == 3
        assert counted["search_relevance_annotate_webhooks_total{ignored}"] >= 1
        assert bridge.alive()
        assert len(bridge_events(kafka_bootstrap, group.outputs.annotations)) == produced
        assert SECRET not in bridge.log_text() and handle.access_token not in bridge.log_text()

        # 7. Label Studio down: new requests wait, and get their tasks when it is back
        if handle.server is not None:
            errors_before = bridge.metrics().get("search_relevance_annotate_label_studio_errors_total", 0)
            handle.stop()
            more = [SimEvent("impressions", b"ann-late", json.dumps({
                "type": "impression", "session_id": "ann-late", "query": "新的查询", "query_bucket": "tail",
                "ranker": "ranker-a", "variant": "control", "ts": start + SESSIONS + 1802,
                "results": [{"doc_id": "late-1", "position": 1}, {"doc_id": "late-2", "position": 2}]},
                ensure_ascii=False).encode(), start + SESSIONS + 1802)]
            assert stream.send(more) == 1
            wait_for("a Label Studio error", lambda: bridge.metrics().get(
                "search_relevance_annotate_label_studio_errors_total", 0) > errors_before, bridge=bridge)
            waiting = bridge.metrics()  # the request held while Label Studio is down: on /metrics
            assert waiting["search_relevance_annotate_backlog_requests"] >= 1
            assert waiting["search_relevance_annotate_oldest_request_age_seconds"] > 0
            handle.start()
            wait_for("the waiting request's tasks", lambda: {("新的查询", "late-1"), ("新的查询", "late-2")} <= {
                (t["data"]["query"], t["data"]["doc_id"]) for t in handle.tasks(project)}, bridge=bridge)
            flushed = {(json.loads(e.value)["query"], "flush-doc") for e in flush}  # the flush sessions' pairs
            pairs = Counter((t["data"]["query"], t["data"]["doc_id"]) for t in handle.tasks(project))
            assert set(pairs) == unjudged | flushed | {("新的查询", "late-1"), ("新的查询", "late-2")}
            assert set(pairs.values()) == {1}
            # creating tasks called no webhook: the one ignored is the PROJECT_UPDATED sent by hand above
            assert bridge.metrics()["search_relevance_annotate_webhooks_total{ignored}"] == 1
        assert group.restarts_seen() == []
    finally:
        bridge.stop()
    if os.environ.get("MONITOR_TEST_VERBOSE"):
        print(bridge.log_text()[-3000:])
