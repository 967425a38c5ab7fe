"""Alertmanager, for real: the shipped configuration is valid, and an alert posted is read back."""

from __future__ import annotations

import subprocess
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from monitor.services.alertmanager import CONFIG
from monitor.services.install import require_binary
from tests.support.http_helpers import http_json

pytestmark = pytest.mark.integration


def test_amtool_accepts_the_shipped_configuration() -> None:
    done = subprocess.run(
        [require_binary("amtool"), "check-config", str(CONFIG)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_posted_alert_is_read_back_from_the_api(alertmanager_url: str) -> None:
    test_id = uuid.uuid4().hex
    now = datetime.now(UTC)
    alert = {
        "labels": {
            "alertname": "RelevanceDCGDropAfterDeploy",
            "severity": "warning",
            "bucket": "head",
            "ranker": "ranker-v2",
            "test_id": test_id,
        },
        "annotations": {
            "summary": "DCG@40 of head queries dropped after deploy of ranker-v2",
            "description": "rolling DCG@40 fell from 2.28 to 2.02",
            "runbook_url": "https://example.invalid/runbooks/dcg-drop",
        },
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=10)).isoformat(),
    }
    http_json(f"{alertmanager_url}/api/v2/alerts", [alert])

    query = urllib.parse.urlencode({"filter": f'test_id="{test_id}"'})
    found = http_json(f"{alertmanager_url}/api/v2/alerts?{query}")

    assert len(found) == 1
    assert found[0]["labels"] == alert["labels"]
    assert found[0]["annotations"] == alert["annotations"]
    assert found[0]["status"]["state"] == "active"
    assert found[0]["receivers"] == [{"name": "default"}]
