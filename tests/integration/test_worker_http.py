"""The worker's HTTP endpoints on a real worker (real Kafka and Redis), with ``MONITOR_DEPLOY_TOKEN`` set.

* ``/healthz`` answers 200; ``/readyz`` answers 200 once the worker consumes (503 with its reasons before);
* ``POST /deploys`` refuses a request without the bearer token or with a wrong one (401, nothing produced),
  an invalid body (400, the error names the field), and accepts a valid deploy (202 with its partition
  and offset); once consumed, the deploy is exported as
  ``search_relevance_deploy_timestamp_seconds{ranker,kind}``;
* ``/metrics`` parses, and after a small simulated stream (labels, canary, invalid events) holds none
  of its session ids, document ids or query texts anywhere in its text.
"""

from __future__ import annotations

import json
import time
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim import SimConfig, SimEvent, SimResult, simulate
from tests.support.worker_harness import (
    Group,
    Response,
    Stream,
    Worker,
    flush_events,
    parse_metrics,
    read_topic,
)

pytestmark = pytest.mark.integration

CONFIG_TOML = stream_toml(StreamConfig(join_window=1800, min_coverage=0.8, max_closes_per_step=1_000_000,
                                       budget={"head": 1e9, "torso": 1e9, "tail": 1e9}))
JOIN_WINDOW = 1800


@dataclass
class Served:
    group: Group
    worker: Worker
    token: str
    tag: str
    result: SimResult
    events: list[SimEvent]
    early_readyz: list[Response]


@pytest.fixture(scope="module")
def served(kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tag = uuid.uuid4().hex[:10]
    token = f"tok-{uuid.uuid4().hex}"
    result = simulate(SimConfig(seed=11, n_sessions=150, duration_s=1800, id_prefix=f"sess{tag}",
                                control_ranker=f"ctl-{tag}", canary_ranker=f"cny-{tag}", bucket_hint_share=0.5,
                                invalid_rate=0.05))
    stream = Stream(kafka_bootstrap)
    events = [*result.events, *flush_events(stream, max(e.ts for e in result.events) + JOIN_WINDOW + 1,
                                            prefix=f"flush{tag}")]
    assert stream.send(events) == len(events)
    group = Group(stream, redis_url, tmp_path_factory.mktemp("http"), "http", CONFIG_TOML,
                  extra_env={"MONITOR_DEPLOY_TOKEN": token})
    try:
        worker = group.spawn()
        early: list[Response] = []
        deadline = time.monotonic() + 90
        while True:  # /readyz from the first moment the port answers until it says ready
            try:
                answer = worker.request("/readyz", timeout=5)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                answer = None
            if answer is not None:
                if answer.status == 200:
                    break
                early.append(answer)
            assert worker.process.poll() is None, worker.log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"not ready in 90 s:\n{worker.log.read_text()[-4000:]}"
            time.sleep(0.1)
        group.drain()
        yield Served(group, worker, token, tag, result, events, early)
    finally:
        group.stop()


def post(worker: Worker, body: object, token: str | None, raw: bytes | None = None) -> Response:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else json.dumps(body).encode()
    return worker.request("/deploys", data, headers, method="POST")


def deploys_on_topic(served: Served) -> list[dict[str, object]]:
    return [json.loads(value) for _, value, _ in read_topic(served.group.stream.bootstrap,
                                                              served.group.outputs.deploys)]


def test_healthz_and_readyz(served: Served) -> None:
    health = served.worker.request("/healthz")
    assert (health.status, health.json()) == (200, {"status": "ok"})
    ready = served.worker.request("/readyz")
    assert (ready.status, ready.json()) == (200, {"status": "ready"})
    for answer in served.early_readyz:  # before it joined its group (if the port answered that early)
        assert answer.status == 503, answer
        body = answer.json()
        assert body["status"] == "not ready" and body["problems"], body
        assert all(p.startswith(("kafka:", "redis:")) for p in body["problems"]), body
    print(f"\n/readyz answered 503 {len(served.early_readyz)} times before 200")


def test_deploys_without_the_token_or_with_a_wrong_one_are_refused(served: Served) -> None:
    ranker = f"unauthorized-{served.tag}"
    deploy = {"type": "deploy", "kind": "deploy", "ranker": ranker, "ts": 1_763_800_000.0}
    for token in (None, "wrong", served.token + "x", served.token[:-1], ""):
        answer = post(served.worker, deploy, token)
        assert answer.status == 401, (token, answer)
        assert "token" in answer.json()["error"]
        assert served.token.encode() not in answer.body
    for scheme in (f"Basic {served.token}", served.token, f"Bearer  {served.token}",
                   f"Bearer {served.token}, Bearer {served.token}"):
        answer = served.worker.request("/deploys", json.dumps(deploy).encode(),
                                       {"Authorization": scheme}, method="POST")
        assert answer.status == 401, (scheme, answer)
    # an invalid body without the token is refused for the token, before it is looked at
    assert post(served.worker, {"type": "deploy"}, None).status == 401
    # a later accepted deploy is on the topic; the refused ones are not
    accepted = post(served.worker, {**deploy, "ranker": f"after-{served.tag}"}, served.token)
    assert accepted.status == 202, accepted
    rankers = [d.get("ranker") for d in deploys_on_topic(served)]
    assert f"after-{served.tag}" in rankers
    assert ranker not in rankers


@pytest.mark.parametrize(("body", "field", "code"), [
    ({"type": "deploy", "kind": "upgrade", "ranker": "r", "ts": 1_763_800_000}, "kind", None),
    ({"type": "deploy", "ranker": "r", "ts": 1_763_800_000}, "kind", None),
    ({"type": "deploy", "kind": "rollback", "ts": 1_763_800_000}, "ranker", "missing_field"),
    ({"type": "deploy", "kind": "rollback", "ranker": 7, "ts": 1_763_800_000}, "ranker", "wrong_type"),
    ({"type": "deploy", "kind": "rollback", "ranker": "r"}, "ts", "missing_field"),
    ({"type": "deploy", "kind": "rollback", "ranker": "r", "ts": -5}, "ts", None),
    ({"type": "deploy", "kind": "rollback", "ranker": "r", "ts": "yesterday"}, "ts", None),
    ({"type": "deploy", "kind": "rollback", "ranker": "r", "ts": 1_763_800_000, "previous": ["x"]}, "previous",
     "wrong_type"),
    ({"type": "deploy", "schema": 99, "kind": "rollback", "ranker": "r", "ts": 1_763_800_000}, "schema",
     "unknown_schema"),
    ({"type": "deploy", "kind": "canary_share", "ranker": "r", "ts": 1_763_800_000}, "share", "missing_field"),
    ({"type": "deploy", "kind": "canary_start", "ranker": "r", "ts": 1_763_800_000, "share": 1.5}, "share",
     "invalid_value"),
    ({"type": "deploy", "kind": "canary_share", "ranker": "r", "ts": 1_763_800_000, "share": "5%"}, "share",
     "wrong_type"),
    ({"type": "deploy", "kind": "rollback", "ranker": "r", "ts": 1_763_800_000, "share": 0.5}, "share",
     "invalid_value"),
    ({"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 1_763_800_000,
      "results": [{"doc_id": "d", "position": 1, "score": 1.0}]}, "type", "wrong_topic"),
])
def test_an_invalid_deploy_is_refused_naming_the_field(served: Served, body: dict[str, object], field: str,
                                                       code: str | None) -> None:
    answer = post(served.worker, body, served.token)
    assert answer.status == 400, answer
    error = answer.json()
    assert error["error"].startswith(f"{field}: "), error
    if code is not None:
        assert error["code"] == code, error


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b"", b"[]", b'"deploy"'])
def test_a_body_that_is_not_an_event_is_refused(served: Served, raw: bytes) -> None:
    answer = post(served.worker, None, served.token, raw=raw)
    assert answer.status == 400, answer
    assert answer.json()["error"]


def test_a_valid_deploy_is_accepted_produced_and_exported(served: Served) -> None:
    ranker = f"released-{served.tag}"
    ts = 1_763_800_123.5
    deploy = {"type": "deploy", "schema": 1, "kind": "canary_end", "ranker": ranker, "ts": ts,
              "previous": f"ctl-{served.tag}"}
    answer = post(served.worker, deploy, served.token)
    assert answer.status == 202, answer
    body = answer.json()
    assert body["accepted"] == {"kind": "canary_end", "ranker": ranker, "ts": ts}
    assert isinstance(body["partition"], int) and 0 <= body["partition"] < served.group.stream.partitions
    assert isinstance(body["offset"], int) and body["offset"] >= 0
    assert deploy in deploys_on_topic(served)  # produced as sent

    exported_deploy(served, "canary_end", ranker, ts)
    samples = parse_metrics(served.worker.metrics_text())  # the simulator's own deploys are exported too
    assert samples[("search_relevance_deploy_timestamp_seconds",
                    (("kind", "canary_start"), ("ranker", f"cny-{served.tag}")))] == served.result.config.canary_ts


def exported_deploy(served: Served, kind: str, ranker: str, ts: float) -> None:
    """The worker's /metrics once it exports the deploy event of ``kind`` and ``ranker`` (60 s at most),
    checked to carry its ``ts``."""
    key = ("search_relevance_deploy_timestamp_seconds", (("kind", kind), ("ranker", ranker)))
    deadline = time.monotonic() + 60
    while key not in (samples := parse_metrics(served.worker.metrics_text())):
        assert time.monotonic() < deadline, f"the accepted {kind} of {ranker} never reached /metrics"
        time.sleep(0.25)
    assert samples[key] == ts


def test_a_change_of_share_is_accepted_produced_with_its_share_and_exported(served: Served) -> None:
    """A ramp step (``canary_share``): the share passes through to the deploys topic as sent, and the
    event is exported under its own kind."""
    ranker = f"ramped-{served.tag}"
    ts = 1_763_800_456.25
    deploy = {"type": "deploy", "schema": 1, "kind": "canary_share", "ranker": ranker, "share": 0.2, "ts": ts}
    answer = post(served.worker, deploy, served.token)
    assert answer.status == 202, answer
    assert answer.json()["accepted"] == {"kind": "canary_share", "ranker": ranker, "ts": ts, "share": 0.2}
    assert deploy in deploys_on_topic(served)  # produced as sent, share included
    exported_deploy(served, "canary_share", ranker, ts)


def test_metrics_parse_and_hold_no_session_document_or_query(served: Served) -> None:
    answer = served.worker.request("/metrics")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=")  # the text exposition format
    text = answer.body.decode()
    samples = parse_metrics(text)
    # not vacuous: this stream was consumed and scored, and the invalid events counted
    consumed = sum(v for (name, _), v in samples.items() if name == "search_relevance_events_total")
    assert consumed >= len(served.events)
    scored = sum(v for (name, labels), v in samples.items() if name == "search_relevance_sessions_scored"
                 and dict(labels)["window"] == "24h" and dict(labels)["ranker"].endswith(served.tag))
    assert scored > 50
    assert any(name == "search_relevance_dead_letters_total" and v > 0 for (name, _), v in samples.items())

    sessions = served.result.sessions
    session_ids = {*sessions, *(json.loads(e.value)["session_id"] for e in served.events
                                if e.topic == "impressions" and e.expected_error is None)}
    documents = {d for s in sessions.values() for d in s.doc_ids} | \
        {d for grades in served.result.pools.values() for d in grades} | {"flush-doc"}
    queries = {s.query for s in sessions.values()} | set(served.result.pools) | \
        {json.loads(e.value)["query"] for e in served.events
         if e.topic == "impressions" and e.expected_error is None}
    escaped = text.encode("unicode_escape").decode()  # in case a label value were escaped
    for what, values in (("session id", session_ids), ("document id", documents), ("query", queries)):
        assert values
        leaked = sorted(v for v in values if v in text or v in escaped)
        assert not leaked, f"{what}s in /metrics: {leaked[:5]}"
    print(f"\n/metrics: {len(text)} characters, {len(samples)} samples; none of {len(session_ids)} session ids, "
          f"{len(documents)} document ids, {len(queries)} queries")
