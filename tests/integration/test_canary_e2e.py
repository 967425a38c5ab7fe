"""The canary end to end on the real stack: Kafka, Redis, a real ``monitor worker`` that alerts the real
Alertmanager directly (``MONITOR_ALERTMANAGER_URL``, verdicts checked every second), and ``monitor canary``.

What it must show:

* a canary whose tail queries lose 10% of their DCG fires the tail alert in Alertmanager, with the effect
  size in its summary, and nothing for head or torso; ``monitor canary --candidate <canary> --json`` reports
  the regression and exits 1;
* the same traffic without the drop fires nothing, however long one waits;
* a rollback (``POST /deploys``) resolves the alert: it leaves Alertmanager's active alerts.

The traffic (``monitor/sim``) is weighted to the tail (60% of sessions, every session labelled, one
batch annotation per session) so that 5,000 sessions give ≈ 1,500 tail sessions per arm: a 10% drop is a
regression after ≈ 600 per arm in this simulation (docs/canary.md: a median of 2,592 in the benchmark's
sparser traffic), and head and torso still get ≈ 500 per arm, enough for a verdict. The simulator's
broken lists invert the relevance order, so the same canary also loses ≈ 30% of its tail PNR: the tail
bucket fires on both metrics. Seed 4 was checked in process (``MemoryPipeline``) at every 50th event of
both streams: no head or torso regression and, without the drop, no regression at any point, so alerts
raised from the worker's intermediate states cannot differ either. Each test uses ranker names of its own,
so concurrent runs against one Alertmanager do not see each other's alerts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from monitor.core.canary.alerts import ALERTNAMES, AlertConfig, annotations_of
from monitor.sim import simulate
from tests.support.canary_e2e import (
    ALERT_INTERVAL,
    CONFIG_TOML,
    JOIN_WINDOW,
    TRAFFIC,
    CandidateRun,
    comparison,
    drained,
)
from tests.support.http_helpers import eventually
from tests.support.worker_harness import Group, parse_metrics

pytestmark = pytest.mark.integration


class Canary(CandidateRun):
    """A run whose candidate is the canary."""

    @property
    def canary(self) -> str:
        return self.candidate


@pytest.fixture
def run_canary(kafka_bootstrap: str, redis_url: str, alertmanager_url: str,
               tmp_path: Path) -> Iterator[Any]:
    groups: list[Group] = []

    def run(regression: float) -> Canary:
        started = time.monotonic()
        tag = uuid.uuid4().hex[:10]
        control, canary = f"control-{tag}", f"canary-{tag}"
        result = simulate(replace(TRAFFIC, regression=regression, control_ranker=control, canary_ranker=canary,
                                  id_prefix=f"s{tag}"))
        group, worker, sent = drained(groups, kafka_bootstrap, redis_url, alertmanager_url, tmp_path,
                                      f"canary-{tag}", CONFIG_TOML, result.events, JOIN_WINDOW)
        return Canary(group, worker, control, canary, sent, time.monotonic() - started)

    yield run
    for group in groups:
        assert group.restarts_seen() == []
        group.stop()


def test_a_tail_dcg_drop_fires_the_tail_alert_and_a_rollback_resolves_it(run_canary: Any) -> None:
    c: Canary = run_canary(0.10)

    # monitor canary: the regression, with exit status 1
    status, rows = c.verdicts()
    assert status == 1
    assert {(r["bucket"], r["metric"]) for r in rows} == {(b, m) for b in ("head", "torso", "tail")
                                                          for m in ("dcg", "pnr")}
    assert all(r["kind"] == "canary" and r["baseline"] == c.control for r in rows)
    by = {(r["bucket"], r["metric"]): r for r in rows}
    tail = by[("tail", "dcg")]
    assert tail["verdict"] == "regression", tail
    assert -0.15 < tail["estimate"] < -0.06 and tail["upper"] < 0, tail  # 10% injected
    assert min(tail["n_baseline"], tail["n_candidate"]) > 1000
    for bucket in ("head", "torso"):
        for metric in ("dcg", "pnr"):
            row = by[(bucket, metric)]
            assert row["verdict"] != "regression", row
            assert min(row["n_baseline"], row["n_candidate"]) >= 200, row  # judged, not just too few
    regressions = {key for key, r in by.items() if r["verdict"] == "regression"}
    assert regressions == {("tail", "dcg"), ("tail", "pnr")}  # the broken lists hurt tail PNR too

    # Alertmanager: exactly the tail alerts, with the final effect in their summaries
    config = AlertConfig()
    wanted = {key: annotations_of(comparison(by[key]), config)["summary"] for key in regressions}

    def fired() -> dict[tuple[str, str], str]:
        """Alertmanager holds the tail alerts of the final verdicts"""
        got = {(a["labels"]["bucket"], a["labels"]["metric"]): a["annotations"]["summary"] for a in c.alerts()}
        return got if got == wanted else {}

    eventually(fired, seconds=30)
    time.sleep(3 * ALERT_INTERVAL + 1)  # a few more rounds change nothing
    alerts = c.alerts()
    assert len(alerts) == 2
    for alert in alerts:
        labels = alert["labels"]
        key = (labels["bucket"], labels["metric"])
        assert labels == {"alertname": ALERTNAMES["canary"], "severity": "critical", "bucket": "tail",
                          "metric": key[1], "ranker": c.canary, "baseline": c.control}
        assert alert["status"]["state"] == "active"
        row = by[key]
        summary = alert["annotations"]["summary"]
        assert summary == wanted[key]
        assert f"{c.canary} is {abs(row['estimate']):.1%} below {c.control}" in summary  # the effect size
        assert "95% CS" in summary
        assert f"Canary {c.canary} against control {c.control} on tail queries" in \
            alert["annotations"]["description"]
        assert alert["annotations"]["runbook_url"].endswith(f"/{ALERTNAMES['canary']}.md")
    print(f"\n{c.messages} messages drained in {c.seconds:.1f} s; alerts: "
          + "; ".join(a["annotations"]["summary"] for a in alerts))

    # a rollback of the canary resolves them
    rolled_back = time.time()
    answer = c.worker.request("/deploys", json.dumps({"type": "deploy", "kind": "rollback", "ranker": c.canary,
                                                      "ts": rolled_back}).encode(),
                              {"Content-Type": "application/json"}, method="POST")
    assert answer.status == 202, answer
    started = time.monotonic()

    def resolved() -> bool:
        """the rollback resolved the alerts (they left Alertmanager's active list)"""
        return c.alerts() == []

    eventually(resolved, seconds=30)  # far sooner than the 4-minute endsAt of a firing alert would
    print(f"resolved {time.monotonic() - started:.1f} s after the rollback")
    samples = parse_metrics(c.worker.metrics_text())
    assert samples[("search_relevance_deploy_timestamp_seconds",
                    (("kind", "rollback"), ("ranker", c.canary)))] == pytest.approx(rolled_back, abs=1e-3)
    assert not any(name == "search_relevance_canary_verdict" and dict(labels)["candidate"] == c.canary
                   for name, labels in samples)
    status, rows = c.verdicts()
    assert (status, rows) == (2, [])  # no comparison for a rolled-back canary
    time.sleep(3 * ALERT_INTERVAL + 1)
    assert c.alerts() == []  # and it stays resolved


def test_the_same_traffic_without_a_drop_fires_nothing(run_canary: Any) -> None:
    c: Canary = run_canary(0.0)
    status, rows = c.verdicts()
    assert status == 0, rows
    assert {(r["bucket"], r["metric"]) for r in rows} == {(b, m) for b in ("head", "torso", "tail")
                                                          for m in ("dcg", "pnr")}
    assert all(r["verdict"] != "regression" for r in rows), rows
    tail = next(r for r in rows if (r["bucket"], r["metric"]) == ("tail", "dcg"))
    assert min(tail["n_baseline"], tail["n_candidate"]) > 1000 and abs(tail["estimate"]) < 0.03, tail
    samples = parse_metrics(c.worker.metrics_text())
    verdicts = {(dict(labels)["bucket"], dict(labels)["metric"]): value for (name, labels), value in samples.items()
                if name == "search_relevance_canary_verdict" and dict(labels)["candidate"] == c.canary}
    assert len(verdicts) == 6 and -1 not in verdicts.values(), verdicts
    time.sleep(5 * ALERT_INTERVAL + 1)  # several verdict rounds after the whole stream
    assert c.alerts() == []
    print(f"\n{c.messages} messages drained in {c.seconds:.1f} s; no alert")
