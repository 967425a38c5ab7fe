"""A totally broken canary end to end on the real stack (issue 26): Kafka, Redis, a real ``monitor worker``
that alerts the real Alertmanager directly (``MONITOR_ALERTMANAGER_URL``, verdicts checked every second),
its ``/metrics`` and ``monitor canary``.

What it must show: a canary at 5% share whose ranker returns only irrelevant documents (tail queries)
fires a regression alert within two looks of ``min_sessions``:

* Alertmanager holds ``SearchRelevanceCanaryRegression`` for the tail, on DCG and on PNR, naming the
  candidate and its control, and nothing else about this canary (no other bucket, no sample-ratio alert);
* ``monitor canary --candidate <canary> --json``: the tail's DCG regressed with an estimate of exactly
  −100% (the candidate's arm is 0, bounded exactly: docs/canary.md, "Total failure"), PNR regressed, the
  pair's overall verdict is regression, and it is trusted (the sample-ratio check ran, on the declared
  5%, and found the split as declared);
* the verdict changed to regression (``changed_at``, also exported as
  ``search_relevance_canary_verdict_changed_timestamp_seconds``) no later than the end of the epoch after
  the first epoch in which both arms had ``min_sessions`` (200, the default) scored sessions, i.e. at the
  first look that may decide or the one after. That epoch comes from the simulator's ground truth
  (every session labelled, all of its top k, so every session is scored: ``min_coverage`` is met; the
  worker's final session counts are checked to equal the ground truth's), not from the worker;
* ``search_relevance_canary_sample_ratio_mismatch`` is 0 for every pair of the canary.

The traffic (``tests/support/canary_broken_e2e.py``) reaches ``min_sessions`` in the canary only two hours
into three (the 8th epoch of 12), so "within two looks" is a real bound: a verdict that waited for the
stream's end, or one look longer, would miss it. The verdict path is computed from the epochs, so however
fast the worker drains, its looks are those of event time.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.core.canary import CanaryConfig
from monitor.core.canary.alerts import ALERTNAMES, AlertConfig, annotations_of
from monitor.sim import simulate
from tests.support.canary_broken_e2e import (
    BROKEN_BUCKET,
    CONFIG_TOML,
    JOIN_WINDOW,
    TRAFFIC,
    broken_sessions,
    impression_share,
    looks,
)
from tests.support.canary_e2e import ALERT_INTERVAL, comparison
from tests.support.http_helpers import eventually, http_json
from tests.support.worker_harness import Group, Stream, flush_events, parse_metrics

pytestmark = pytest.mark.integration

DRAIN_TIMEOUT = 300.0  # seconds; the drain takes ≈ 30 s on the 2-core machine
BUCKETS = ("head", "torso", "tail")


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S")


def test_a_canary_returning_only_irrelevant_documents_fires_within_two_looks_of_min_sessions(
        kafka_bootstrap: str, redis_url: str, alertmanager_url: str, tmp_path: Path) -> None:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:10]
    control, canary = f"control-{tag}", f"broken-{tag}"
    result = simulate(replace(TRAFFIC, control_ranker=control, canary_ranker=canary, id_prefix=f"s{tag}"))
    sessions = list(result.sessions.values())
    assert broken_sessions(sessions) == []  # every canary tail session shows only irrelevant documents
    truth = looks(sessions, BROKEN_BUCKET, result.config.canary_ts)
    assert truth.first_full >= math.floor(result.config.canary_ts / truth.epoch) + 4, \
        "min_sessions must come several epochs in, or 'within two looks' bounds nothing"
    assert truth.deadline < max(s.ts for s in sessions), "the stream must go on past the deadline"

    stream = Stream(kafka_bootstrap)
    events = [*result.events,
              *flush_events(stream, max(e.ts for e in result.events) + JOIN_WINDOW + 1, prefix=f"flush{tag}")]
    assert stream.send(events) == len(events)
    group = Group(stream, redis_url, tmp_path, f"broken-{tag}", CONFIG_TOML, extra_env={
        "MONITOR_ALERTMANAGER_URL": alertmanager_url, "MONITOR_ALERT_INTERVAL": str(ALERT_INTERVAL)})
    try:
        worker = group.start()
        group.drain(timeout=DRAIN_TIMEOUT)
        drained = time.monotonic() - started

        # monitor canary: the tail regressed on both metrics, −100% on DCG, trusted
        done = group.cli("canary", "--candidate", canary, "--json")
        assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
        rows: list[dict[str, Any]] = json.loads(done.stdout)
        assert {(r["bucket"], r["metric"]) for r in rows} == {(b, m) for b in BUCKETS for m in ("dcg", "pnr")}
        assert all(r["kind"] == "canary" and r["baseline"] == control for r in rows)
        by = {(r["bucket"], r["metric"]): r for r in rows}
        dcg, pnr = by[(BROKEN_BUCKET, "dcg")], by[(BROKEN_BUCKET, "pnr")]
        assert dcg["verdict"] == "regression", dcg
        assert dcg["estimate"] == pytest.approx(-1.0, abs=1e-12) and dcg["upper"] < 0, dcg
        assert pnr["verdict"] == "regression", pnr
        assert (dcg["n_baseline"], dcg["n_candidate"]) == (truth.total("control"), truth.total("canary")), \
            "every session of the bucket is scored"
        for row in (dcg, pnr):
            assert row["trusted"] is True, row
            assert row["overall"]["verdict"] == "regression" and row["overall"]["trusted"] is True, row
        regressions = {key for key, r in by.items() if r["verdict"] == "regression"}
        assert regressions == {(BROKEN_BUCKET, "dcg"), (BROKEN_BUCKET, "pnr")}, by

        # the sample-ratio check ran on the declared share and found the split as declared
        x, y = impression_share(sessions, BROKEN_BUCKET, result.config.canary_ts)
        for row in rows:
            checks = {c["name"]: c for c in row["checks"]}
            ratio = checks["sample_ratio"]
            assert ratio["flagged"] is False and ratio["expected"] == pytest.approx(TRAFFIC.canary_share), row
            assert ratio["evidence"] < math.log(1 / CanaryConfig().check_alpha), ratio
        tail_ratio = next(c for c in dcg["checks"] if c["name"] == "sample_ratio")
        assert tail_ratio["estimate"] == pytest.approx(x / (x + y) / TRAFFIC.canary_share - 1, abs=1e-9), \
            (tail_ratio, x, y)

        # within two looks of min_sessions, in event time
        changed_at = dcg["changed_at"]
        assert changed_at is not None and dcg["changes"] == 1, dcg
        assert truth.earliest <= changed_at <= truth.deadline, (
            f"regression at {_utc(changed_at)} (look {truth.look(changed_at)}); both arms had "
            f"{truth.min_sessions} sessions first at look {truth.look(truth.earliest)} "
            f"({_utc(truth.earliest)}): the second look after ends {_utc(truth.deadline)}")
        assert truth.earliest <= pnr["changed_at"] <= truth.deadline, pnr
        # the worker's own looks agree with the ground truth's: eligible from the same epoch on
        for row in (dcg, pnr):
            assert row["resets"] == 0 and f"kept over {truth.eligible} looks" in row["reason"], row

        # /metrics: the verdict's change time as exported, and no sample-ratio mismatch for any pair
        samples = parse_metrics(worker.metrics_text())
        pair = (("baseline", control), ("candidate", canary))
        for bucket in BUCKETS:
            key = tuple(sorted((("bucket", bucket), ("kind", "canary"), *pair)))
            assert samples[("search_relevance_canary_sample_ratio_mismatch", key)] == 0, bucket
        for metric, row in (("dcg", dcg), ("pnr", pnr)):
            key = tuple(sorted((("bucket", BROKEN_BUCKET), ("kind", "canary"), ("metric", metric), *pair)))
            assert samples[("search_relevance_canary_verdict_changed_timestamp_seconds", key)] == \
                pytest.approx(row["changed_at"]), metric
            assert samples[("search_relevance_canary_verdict", key)] == -1, metric

        # Alertmanager: exactly the tail's two regression alerts, with the final verdicts' summaries
        wanted = {key: annotations_of(comparison(by[key]), AlertConfig())["summary"] for key in regressions}
        query = urllib.parse.urlencode({"filter": f'ranker="{canary}"'})

        def alerts() -> list[dict[str, Any]]:
            return list(http_json(f"{alertmanager_url}/api/v2/alerts?{query}"))

        def fired() -> list[dict[str, Any]]:
            """Alertmanager holds the tail's regression alerts of the final verdicts, and nothing else"""
            got = alerts()
            summaries = {(a["labels"].get("bucket"), a["labels"].get("metric")): a["annotations"]["summary"]
                         for a in got}
            return got if summaries == wanted and len(got) == len(wanted) else []

        held = eventually(fired, seconds=30)
        for alert in held:
            labels = alert["labels"]
            assert labels == {"alertname": ALERTNAMES["canary"], "severity": "critical", "bucket": BROKEN_BUCKET,
                              "metric": labels["metric"], "ranker": canary, "baseline": control}, labels
            assert alert["status"]["state"] == "active", alert
        assert f"{canary} is 100.0% below {control}" in wanted[(BROKEN_BUCKET, "dcg")]
        assert group.restarts_seen() == []
        print(f"\n{len(events)} messages drained in {drained:.1f} s, {time.monotonic() - started:.1f} s in all; "
              f"tail sessions control/canary {truth.total('control')}/{truth.total('canary')}; both arms had "
              f"{truth.min_sessions} first at look {truth.look(truth.earliest)} (ends {_utc(truth.earliest)}), "
              f"regression at look {truth.look(changed_at)} ({_utc(changed_at)}; DCG "
              f"{dcg['estimate']:+.1%}, PNR at look {truth.look(pnr['changed_at'])}); sample ratio "
              f"{tail_ratio['estimate']:+.1%} of the declared {TRAFFIC.canary_share:.0%} (not flagged)")
    finally:
        group.stop()
