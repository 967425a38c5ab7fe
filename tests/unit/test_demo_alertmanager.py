"""monitor demo --alertmanager URL: the alerts it prints are the ones Alertmanager receives.

A 50% loss in every bucket fires within a short run (head has 200 canary sessions after about an hour
of its two), so these runs take a couple of seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any

import pytest

from monitor.alerting import AlertmanagerClient
from monitor.alerting.alertmanager import rfc3339
from monitor.demo import cli
from monitor.demo.demo import DemoOptions, run_demo
from monitor.demo.settings import DemoSettings
from monitor.demo.verdict_rows import CanaryJudge

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

SETTINGS = DemoSettings(sessions=1500, hours=2.0, seed=1, regression=0.5, bucket="all")
ARGS = ["--fast", "--port", "0", "--sessions", "1500", "--hours", "2", "--seed", "1", "--regression", "0.5",
        "--bucket", "all", "--json"]


def test_the_demo_posts_its_alerts_to_the_alertmanager_api() -> None:
    posted: list[tuple[str, list[dict[str, Any]]]] = []

    def post(url: str, body: bytes, timeout: float) -> int:
        posted.append((url, json.loads(body)))
        return 200

    client = AlertmanagerClient("http://127.0.0.1:9093", post=post)
    result = run_demo(DemoOptions(SETTINGS, port=None, fast=True, alertmanager="http://127.0.0.1:9093"),
                      io.StringIO(), io.StringIO(), CanaryJudge(), alertmanager=client, tty=False)
    fired = result.summary["alerts"]
    assert fired and {a["bucket"] for a in fired} == {"head"}
    assert {url for url, _ in posted} == {"http://127.0.0.1:9093/api/v2/alerts"}
    sent = {json.dumps(a["labels"], sort_keys=True): a for _, batch in posted for a in batch}
    for alert in fired:
        received = sent[json.dumps(alert["labels"], sort_keys=True)]
        assert received["annotations"]["summary"] and received["annotations"]["runbook_url"]
        assert received["startsAt"] == rfc3339(alert["ts"])  # the event time it fired at
    assert result.summary["alertmanager"]["delivered"] >= len(fired)
    assert result.summary["alertmanager"]["pending"] == 0


def test_a_bad_alertmanager_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--alertmanager", "127.0.0.1:9093"]) == 2
    assert "--alertmanager: url: expected an http:// or https:// address" in capsys.readouterr().err


@pytest.mark.integration
def test_a_real_alertmanager_holds_the_demo_alert(alertmanager_url: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main([*ARGS, "--alertmanager", alertmanager_url]) == 0
    summary = json.loads(out.getvalue())
    assert summary["alertmanager"]["delivered"] >= 1
    fired = [a for a in summary["alerts"] if a["status"] == "firing"]
    assert fired
    query = urllib.parse.urlencode({"filter": 'alertname="SearchRelevanceCanaryRegression"'})
    with urllib.request.urlopen(f"{alertmanager_url}/api/v2/alerts?{query}", timeout=10) as response:
        active = json.loads(response.read())
    held = {json.dumps(a["labels"], sort_keys=True): a for a in active}
    for alert in fired:
        found = held[json.dumps(alert["labels"], sort_keys=True)]
        assert found["status"]["state"] == "active"
        starts = datetime.fromisoformat(found["startsAt"].replace("Z", "+00:00")).timestamp()
        assert starts == pytest.approx(alert["ts"], abs=1e-3)  # the event time it fired at in this run
        assert found["annotations"]["summary"].startswith(f"{alert['bucket']} ")
