"""The side-by-side (shadow) comparison end to end on the real stack (issue 28): Kafka, Redis, a real
``monitor worker`` that alerts the real Alertmanager directly (``MONITOR_ALERTMANAGER_URL``, verdicts
checked every second), its ``/metrics``, its state in Redis, and ``monitor canary``.

What it must show:

* a shadow candidate 10% worse (DCG@k) in the tail, with no canary (the control ranker serves every
  session), fires ``SearchRelevanceCanaryRegression`` with ``kind="shadow"``, baseline ``served``, for the
  tail and the candidate (on DCG and on PNR: the simulator's broken lists invert the relevance order),
  nothing for head or torso, while no user is served by it (no impression names it: no relevance series
  of it); ``monitor canary --candidate <candidate> --json`` reports the regression and exits 1;
* an equal shadow candidate fires nothing however long one waits (several verdict rounds after the whole
  stream), its verdicts are never a regression and its DCG passes in every bucket;
* the paired sums (``pair_n``, ``pair_x`` … ``pair_dy_dy``: 20 per group ``bucket|candidate|shadow``) the
  worker wrote equal an offline recomputation from the simulator's ground truth
  (``tests/support/simulated.recompute_paired``, no stream code) to 1e-9: where the worker keeps them,
  its Redis state (the running totals, ``Reader.snapshot``, and the epochs the verdicts read,
  ``Reader.history``), and on ``/metrics``: ``search_relevance_stat_added_total`` minus
  ``..._stat_removed_total`` with ``stat="pair_…"`` for ``ranker=<candidate>, variant="shadow"``, and
  what the verdicts export of them, ``search_relevance_canary_sessions`` (both arms: ``pair_n``) and
  ``search_relevance_canary_estimate`` (ȳ / x̄ − 1, and PNR's ratio of ratios).

The traffic and why seed 4 makes the assertions robust: ``tests/support/shadow_e2e.py``. Each test uses
ranker names of its own, so concurrent runs against one Alertmanager do not see each other's alerts.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from monitor.core.canary import CanaryConfig
from monitor.core.canary.alerts import ALERTNAMES, AlertConfig, annotations_of
from monitor.core.canary.paired import FIELDS as PAIRED_FIELDS
from monitor.core.stream.shadow import FOOTING_FIELDS, SENT_FIELDS
from monitor.core.stream.stats import Stats
from monitor.sim import SimResult, simulate
from monitor.store.keys import Keys
from monitor.store.reader import Reader
from tests.support.canary_e2e import ALERT_INTERVAL, CandidateRun, comparison, drained
from tests.support.http_helpers import eventually
from tests.support.shadow_e2e import (
    CONFIG_TOML,
    DROP,
    JOIN_WINDOW,
    STREAM,
    estimate,
    paired_truth,
    served_only,
    traffic,
)
from tests.support.worker_harness import Group, parse_metrics

pytestmark = pytest.mark.integration

BUCKETS = ("head", "torso", "tail")
METRICS = ("dcg", "pnr")


@dataclass
class Shadow(CandidateRun):
    """A run whose candidate is a shadow ranker, with the simulation it drained."""

    result: SimResult

    def paired_state(self) -> tuple[dict[str, Stats], dict[str, Stats]]:
        """The worker's paired groups in Redis: (running totals, the history's epochs summed)."""
        async def read() -> tuple[dict[str, Stats], dict[str, Stats]]:
            redis = Redis.from_url(self.group.redis_url)
            try:
                reader = Reader(redis, STREAM, Keys(self.group.app_id))
                snapshot = await reader.snapshot()
                history = await reader.history([], CanaryConfig())
            finally:
                await redis.aclose()
            summed: dict[str, Stats] = {}
            for groups in history.epochs.values():
                for group, stats in groups.items():
                    summed.setdefault(group, Stats()).add(stats)
            return snapshot.totals(), summed

        totals, epochs = asyncio.run(read())
        return ({g: s for g, s in totals.items() if g.endswith("|shadow")},
                {g: s for g, s in epochs.items() if g.endswith("|shadow")})


@pytest.fixture
def run_shadow(kafka_bootstrap: str, redis_url: str, alertmanager_url: str,
               tmp_path: Path) -> Iterator[Any]:
    groups: list[Group] = []

    def run(drop: float) -> Shadow:
        started = time.monotonic()
        tag = uuid.uuid4().hex[:10]
        control, candidate = f"control-{tag}", f"shadow-{tag}"
        result = simulate(traffic(candidate, drop, control))
        group, worker, sent = drained(groups, kafka_bootstrap, redis_url, alertmanager_url, tmp_path,
                                      f"shadow-{tag}", CONFIG_TOML, served_only(result), JOIN_WINDOW)
        return Shadow(group, worker, control, candidate, sent, time.monotonic() - started, result)

    yield run
    for group in groups:
        assert group.restarts_seen() == []
        group.stop()


def served_by_no_one(s: Shadow) -> None:
    """Every session was served by the control ranker and carried the candidate's list; the worker has no
    relevance series of the candidate (only its paired group, which they leave out) and no canary."""
    sessions = list(s.result.sessions.values())
    assert {x.ranker for x in sessions} == {s.control} and {x.variant for x in sessions} == {"control"}
    assert all([x.ranker for x in session.shadow] == [s.candidate] for session in sessions)
    samples = parse_metrics(s.worker.metrics_text())
    impressions = {dict(labels)["ranker"] for name, labels in samples if name == "search_relevance_impressions_total"}
    assert impressions == {s.control, "flush"}, impressions
    served = {dict(labels).get("ranker") for name, labels in samples
              if name == "search_relevance_dcg" or (name == "search_relevance_stat_added_total"
                                                    and not dict(labels)["stat"].startswith(("pair_", "sent_")))}
    assert s.candidate not in served, served
    paired = {(dict(labels)["ranker"], dict(labels)["variant"]) for name, labels in samples
              if name == "search_relevance_stat_added_total" and dict(labels)["stat"].startswith(("pair_", "sent_"))}
    assert paired == {(s.candidate, "shadow")}, paired
    kinds = {dict(labels)["kind"] for name, labels in samples if name == "search_relevance_canary_verdict"}
    assert kinds == {"shadow"}, kinds


def assert_paired_sums_are_the_truths(s: Shadow) -> None:
    """The worker's paired sums (Redis: totals and epochs) and what ``/metrics`` exports of them (sessions
    per arm, estimates) equal the ground truth's recomputation to 1e-9 (module docstring)."""
    want = paired_truth(s.result)
    assert set(want) == {f"{b}|{s.candidate}|shadow" for b in BUCKETS}
    totals, epochs = s.paired_state()
    for name, got in (("totals", totals), ("epochs", epochs)):
        assert set(got) == set(want), (name, sorted(got))
        for group, sums in want.items():
            assert set(got[group]) == {*PAIRED_FIELDS, *SENT_FIELDS, *FOOTING_FIELDS} == set(sums), (name, group, sorted(got[group]))
            for field in (*PAIRED_FIELDS, *SENT_FIELDS, *FOOTING_FIELDS):
                assert got[group][field] == pytest.approx(sums[field], rel=1e-9, abs=1e-9), (name, group, field)
    samples = parse_metrics(s.worker.metrics_text())
    for bucket in BUCKETS:
        sums = want[f"{bucket}|{s.candidate}|shadow"]
        group = (("bucket", bucket), ("ranker", s.candidate), ("variant", "shadow"))
        for field in (*PAIRED_FIELDS, *SENT_FIELDS, *FOOTING_FIELDS):
            key = tuple(sorted((*group, ("stat", field))))
            net = samples[("search_relevance_stat_added_total", key)] - \
                samples.get(("search_relevance_stat_removed_total", key), 0.0)
            assert net == pytest.approx(sums[field], rel=1e-9, abs=1e-9), ("/metrics", bucket, field)
        for metric in METRICS:
            labels = (("baseline", "served"), ("bucket", bucket), ("candidate", s.candidate), ("kind", "shadow"),
                      ("metric", metric))
            assert samples[("search_relevance_canary_estimate", labels)] == \
                pytest.approx(estimate(sums, metric), rel=1e-9, abs=1e-9), (bucket, metric)
            for arm in ("baseline", "candidate"):
                key = tuple(sorted((*labels, ("arm", arm))))
                assert samples[("search_relevance_canary_sessions", key)] == sums["pair_n"], (bucket, metric, arm)


def shadow_rows(rows: list[dict[str, Any]], s: Shadow) -> dict[tuple[str, str], dict[str, Any]]:
    """``monitor canary --json``'s rows by (bucket, metric): one per bucket and metric, all of the candidate
    against the served lists, paired (both arms the same sessions), its checks not applicable."""
    assert {(r["bucket"], r["metric"]) for r in rows} == {(b, m) for b in BUCKETS for m in METRICS}, rows
    for r in rows:
        assert (r["kind"], r["baseline"], r["candidate"]) == ("shadow", "served", s.candidate), r
        assert r["n_baseline"] == r["n_candidate"], r
        assert [(c["name"], c.get("applicable", True)) for c in r["checks"]] == [
            ("sample_ratio", False), ("covariate_balance", False), ("shadow_coverage", True)], r
        assert not r["checks"][2]["flagged"], r  # the candidate's list on every request
    return {(r["bucket"], r["metric"]): r for r in rows}


def test_a_shadow_candidate_worse_in_the_tail_fires_its_tail_alert_while_serving_no_one(run_shadow: Any) -> None:
    s: Shadow = run_shadow(DROP)
    served_by_no_one(s)

    # monitor canary: the tail regression, with exit status 1
    status, rows = s.verdicts()
    assert status == 1, rows
    by = shadow_rows(rows, s)
    tail = by[("tail", "dcg")]
    assert tail["verdict"] == "regression", tail
    assert -0.15 < tail["estimate"] < -0.06 and tail["upper"] < 0, tail  # 10% injected
    assert tail["n_candidate"] > 1000, tail
    for bucket in ("head", "torso"):
        for metric in METRICS:
            row = by[(bucket, metric)]
            assert row["verdict"] != "regression", row
            assert row["n_candidate"] >= 200, row  # judged, not just too few
    regressions = {key for key, r in by.items() if r["verdict"] == "regression"}
    assert regressions == {("tail", "dcg"), ("tail", "pnr")}  # the broken lists hurt tail PNR too

    # Alertmanager: exactly the tail alerts, kind shadow, with the final effect in their summaries
    wanted = {key: annotations_of(comparison(by[key]), AlertConfig())["summary"] for key in regressions}

    def fired() -> dict[tuple[str, str], str]:
        """Alertmanager holds the tail alerts of the final verdicts"""
        got = {(a["labels"]["bucket"], a["labels"]["metric"]): a["annotations"]["summary"] for a in s.alerts()}
        return got if got == wanted else {}

    eventually(fired, seconds=30)
    time.sleep(3 * ALERT_INTERVAL + 1)  # a few more rounds change nothing
    alerts = s.alerts()
    assert len(alerts) == 2, alerts
    for alert in alerts:
        labels = alert["labels"]
        key = (labels["bucket"], labels["metric"])
        assert labels == {"alertname": ALERTNAMES["shadow"], "severity": AlertConfig().shadow_severity,
                          "bucket": "tail", "metric": key[1], "ranker": s.candidate, "baseline": "served",
                          "kind": "shadow"}, labels
        assert alert["status"]["state"] == "active", alert
        summary = alert["annotations"]["summary"]
        assert summary == wanted[key]
        assert f"shadow {s.candidate} is {abs(by[key]['estimate']):.1%} below the served lists" in summary
        assert f"No user is served by {s.candidate}." in alert["annotations"]["description"]
    assert_paired_sums_are_the_truths(s)
    print(f"\n{s.messages} messages drained in {s.seconds:.1f} s; alerts: "
          + "; ".join(a["annotations"]["summary"] for a in alerts))


def test_an_equal_shadow_candidate_fires_nothing_and_passes(run_shadow: Any) -> None:
    s: Shadow = run_shadow(0.0)
    served_by_no_one(s)
    status, rows = s.verdicts()
    assert status == 0, rows
    by = shadow_rows(rows, s)
    assert all(r["verdict"] != "regression" for r in rows), rows
    for bucket in BUCKETS:
        assert by[(bucket, "dcg")]["verdict"] == "pass", by[(bucket, "dcg")]
    tail = by[("tail", "dcg")]
    assert tail["n_candidate"] > 1000 and abs(tail["estimate"]) < 0.02, tail
    samples = parse_metrics(s.worker.metrics_text())
    verdicts = {(dict(labels)["bucket"], dict(labels)["metric"]): value for (name, labels), value in samples.items()
                if name == "search_relevance_canary_verdict" and dict(labels)["candidate"] == s.candidate}
    assert len(verdicts) == 6 and -1 not in verdicts.values(), verdicts
    assert all(verdicts[(bucket, "dcg")] == 1 for bucket in BUCKETS), verdicts
    assert_paired_sums_are_the_truths(s)
    time.sleep(5 * ALERT_INTERVAL + 1)  # several verdict rounds after the whole stream
    assert s.alerts() == []
    print(f"\n{s.messages} messages drained in {s.seconds:.1f} s; no alert")
