"""AlertmanagerClient without a network: payloads, re-sends, backoff, the bounded queue, never raising.
(The real Alertmanager is in tests/integration/test_alertmanager_client.py.)"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from monitor.alerting.alertmanager import AlertmanagerClient, postable, rfc3339
from monitor.core.canary.alerts import Notification


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """Records every POST; answers with ``status`` (or raises ``error``)."""

    def __init__(self) -> None:
        self.posts: list[list[dict[str, Any]]] = []
        self.status = 200
        self.error: Exception | None = None

    def __call__(self, url: str, body: bytes, timeout: float) -> int:
        assert url == "http://am.test:9093/api/v2/alerts"
        if self.error is not None:
            raise self.error
        self.posts.append(json.loads(body))
        return self.status


def note(bucket: str = "tail", ends_at: float | None = None, summary: str = "s") -> Notification:
    return Notification({"alertname": "SearchRelevanceCanaryRegression", "bucket": bucket},
                        {"summary": summary}, 500.0, ends_at)


def client(server: Server, clock: Clock, **kwargs: Any) -> AlertmanagerClient:
    return AlertmanagerClient("http://am.test:9093/", clock=clock, monotonic=clock, post=server, **kwargs)


def test_postable_alert_times() -> None:
    assert rfc3339(1_763_712_000.0) == "2025-11-21T08:00:00.000Z"
    firing = postable(note(), now=1_763_712_000.0, ttl=240.0, generator_url="http://g")
    assert firing == {"labels": {"alertname": "SearchRelevanceCanaryRegression", "bucket": "tail"},
                      "annotations": {"summary": "s"}, "startsAt": "1970-01-01T00:08:20.000Z",
                      "endsAt": "2025-11-21T08:04:00.000Z", "generatorURL": "http://g"}
    resolved = postable(note(ends_at=1_763_712_000.0), now=0.0, ttl=240.0)
    assert resolved["endsAt"] == "2025-11-21T08:00:00.000Z" and "generatorURL" not in resolved


def test_send_then_flush_delivers_and_firing_alerts_are_re_sent() -> None:
    server, clock = Server(), Clock()
    am = client(server, clock, resend_interval=60.0)
    am.send([note("tail"), note("head")])
    assert am.flush() is True
    assert [[a["labels"]["bucket"] for a in post] for post in server.posts] == [["tail", "head"]]
    assert server.posts[0][0]["endsAt"] == rfc3339(1_000.0 + 240.0)
    clock.now += 30.0
    assert am.flush() is True and len(server.posts) == 1  # nothing due
    clock.now += 31.0
    am.flush()
    assert len(server.posts) == 2 and server.posts[1][0]["endsAt"] == rfc3339(clock.now + 240.0)
    am.send([note("tail", ends_at=1_100.0)])  # resolved: posted once, no longer re-sent
    am.flush()
    assert server.posts[2] == [postable(note("tail", ends_at=1_100.0), 0.0, 240.0)]
    clock.now += 61.0
    am.flush()
    assert [a["labels"]["bucket"] for a in server.posts[3]] == ["head"]
    assert am.delivered == 6 and am.pending == 0


def test_an_outage_backs_off_and_delivers_the_latest_state_when_back() -> None:
    server, clock = Server(), Clock()
    am = client(server, clock, backoff_initial=1.0, backoff_max=4.0, resend_interval=600.0)
    server.error = ConnectionRefusedError(111, "Connection refused")
    am.send([note("tail")])
    assert am.flush() is False and am.failures == 1
    waits = []
    for _ in range(4):
        assert am.flush() is False  # inside the backoff: no attempt
        before = am.failures
        for step in range(1, 100):
            clock.now += 0.5
            am.flush()
            if am.failures > before:
                waits.append(step * 0.5)
                break
    assert waits == [1.0, 2.0, 4.0, 4.0]  # doubling up to backoff_max
    am.send([note("tail", summary="newer")])  # replaces the queued firing state
    server.error = None
    clock.now += 4.0
    assert am.flush() is True
    assert [a["annotations"]["summary"] for post in server.posts for a in post] == ["newer"]


def test_the_queue_is_bounded_oldest_first(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = Server(), Clock()
    server.status = 503
    am = client(server, clock, max_pending=2)
    with caplog.at_level(logging.WARNING, logger="monitor.alerting"):
        am.send([note("head"), note("torso"), note("torso", summary="again"), note("tail")])
    assert am.pending == 2 and am.dropped == 1
    assert "dropped the firing notification of {'alertname': 'SearchRelevanceCanaryRegression', 'bucket': " \
           "'head'}" in caplog.text
    server.status = 200
    am.flush()
    assert [(a["labels"]["bucket"], a["annotations"]["summary"]) for a in server.posts[-1]] == \
        [("torso", "again"), ("tail", "s")]


def test_large_queues_go_in_batches() -> None:
    server, clock = Server(), Clock()
    am = client(server, clock, batch_size=2)
    am.send([note(f"b{i}") for i in range(5)])
    assert am.flush() is True
    assert [len(post) for post in server.posts] == [2, 2, 1]


def test_rejected_alerts_are_dropped_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = Server(), Clock()
    server.status = 400
    am = client(server, clock)
    with caplog.at_level(logging.ERROR, logger="monitor.alerting"):
        am.send([note(ends_at=1_100.0)])
        assert am.flush() is True
    assert am.pending == 0 and am.dropped == 1 and "rejected 1 alerts as invalid" in caplog.text


def test_unexpected_errors_never_reach_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = Server(), Clock()
    server.error = RuntimeError("boom")
    am = client(server, clock)
    am.send([note()])
    with caplog.at_level(logging.ERROR, logger="monitor.alerting"):
        assert am.flush() is False
    assert "unexpected error while sending alerts" in caplog.text and am.pending == 1


def test_the_background_thread_delivers() -> None:
    server = Server()
    am = AlertmanagerClient("http://am.test:9093", post=server)
    am.start(poll_interval=0.01)
    am.send([note()])
    am.stop()
    assert server.posts and am.pending == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": "am:9093"}, "url: expected an http:// or https:// address, got 'am:9093'"),
    ({"resend_interval": 0}, "resend_interval: expected a positive number, got 0"),
    ({"alert_ttl": 30.0}, "alert_ttl: must be longer than resend_interval (60.0), got 30.0"),
    ({"max_pending": 0}, "max_pending: expected a positive integer, got 0"),
    ({"timeout": float("inf")}, "timeout: expected a positive number, got inf"),
])
def test_settings_are_validated(kwargs: dict[str, Any], message: str) -> None:
    url = kwargs.pop("url", "http://am.test:9093")
    with pytest.raises(ValueError) as error:
        AlertmanagerClient(url, **kwargs)
    assert str(error.value) == message
