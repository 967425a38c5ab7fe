"""The Alertmanager client against a real Alertmanager: alerts arrive with their labels and annotations,
resolutions resolve, and a client that starts while Alertmanager is down delivers once it is up."""

from __future__ import annotations

import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest

from monitor.alerting.alertmanager import AlertmanagerClient
from monitor.core.canary import Comparison, Verdict
from monitor.core.canary.alerts import AlertBook, AlertConfig
from monitor.services.alertmanager import AlertmanagerServer
from monitor.services.install import BINARIES_OF, ensure_binaries
from monitor.services.ports import free_port
from tests.support.http_helpers import eventually, http_json

pytestmark = pytest.mark.integration


def regression(candidate: str, bucket: str = "tail") -> Comparison:
    verdict = Verdict("regression", -0.103, -0.141, -0.065, 12.3, 5678, 1234,
                      "10.3% lower; the 95% confidence sequence excludes no change")
    return Comparison(bucket, "dcg", "canary", "ranker-a", candidate, verdict)


def alerts_of(url: str, ranker: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"filter": f'ranker="{ranker}"'})
    return list(http_json(f"{url}/api/v2/alerts?{query}"))


def test_a_regression_arrives_with_its_labels_and_annotations_and_resolves(alertmanager_url: str) -> None:
    ranker = f"ranker-{uuid.uuid4().hex[:12]}"
    book = AlertBook(AlertConfig())
    client = AlertmanagerClient(alertmanager_url, timeout=5.0)
    fired = book.update(1_000.0, [regression(ranker)])
    client.send(fired)
    assert client.flush() is True

    [alert] = alerts_of(alertmanager_url, ranker)
    assert alert["labels"] == {"alertname": "SearchRelevanceCanaryRegression", "severity": "critical",
                               "bucket": "tail", "metric": "dcg", "ranker": ranker, "baseline": "ranker-a"}
    assert alert["annotations"] == dict(fired[0].annotations)
    assert alert["annotations"]["summary"] == \
        f"tail DCG: {ranker} is 10.3% below ranker-a (95% CS −14.1% … −6.5%)"
    assert set(alert["annotations"]) == {"summary", "description", "runbook_url", "dashboard_url"}
    assert alert["status"]["state"] == "active"
    assert alert["startsAt"].startswith("1970-01-01T00:16:40")

    resolved = book.update(1_060.0, [])  # the comparison is gone: rolled back
    assert [n.status for n in resolved] == ["resolved"]
    client.send(resolved)
    assert client.flush() is True
    assert alerts_of(alertmanager_url, ranker) == []  # resolved alerts leave the active list
    assert client.firing() == []


def test_a_client_started_while_alertmanager_is_down_delivers_when_it_is_up(tmp_path: Path) -> None:
    ensure_binaries(BINARIES_OF["alertmanager"])
    server = AlertmanagerServer(tmp_path, free_port())
    server.start(die_with_parent=True)
    try:
        server.wait_ready()
        server.stop()  # it existed, now it is down
        ranker = f"ranker-{uuid.uuid4().hex[:12]}"
        client = AlertmanagerClient(server.address, timeout=1.0, backoff_initial=0.1, backoff_max=0.5)
        client.send(AlertBook(AlertConfig()).update(1_000.0, [regression(ranker)]))
        assert client.flush() is False
        assert client.pending == 1 and client.failures == 1

        server.start(die_with_parent=True)
        server.wait_ready()
        client.start(poll_interval=0.1)
        try:

            def arrived() -> list[dict[str, Any]]:
                """the queued alert reached the restarted Alertmanager"""
                return alerts_of(server.address, ranker)

            [alert] = eventually(arrived, seconds=20)
        finally:
            client.stop()
        assert alert["labels"]["ranker"] == ranker and alert["status"]["state"] == "active"
        assert client.pending == 0 and client.delivered == 1
    finally:
        server.stop()
