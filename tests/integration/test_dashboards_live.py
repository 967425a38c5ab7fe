"""Every dashboard query against a real Prometheus scraping a real worker fed through real Kafka and Redis.

One ``monitor worker`` listens on the port the session's Prometheus scrapes as job
``search-relevance-monitor`` (``monitor_metrics_port``, every second). It is fed a simulated stream
(monitor/sim) whose event times end now, so every rolling window is current: two hours of head, torso and
tail traffic, a canary (``ranker-b`` against ``ranker-a``, with a tail regression) announced by deploy
events, late, duplicate and corrected labels, sessions that expire unlabelled, and 2% invalid events.
Once the worker has drained the stream and Prometheus has scraped the final state a few times, every query
of :func:`tests.unit.test_dashboards_static.panel_queries` (its variables set to concrete values, e.g.
bucket ``head``, ranker ``ranker-a``, window ``1h``; the canary board's candidate ``ranker-b``) is asked,
as Grafana asks it:

* panel targets: a range query over the dashboards' default range (the last 6 h) at ``$__interval``,
  or an instant query now for ``instant`` targets;
* the deploy annotations: a range query, whose values must be deploy event times in milliseconds;
* variables (``label_values(selector, label)``): the label values endpoint with the selector, which must
  offer the value the panel queries were given.

Each must succeed (no error, no warning) and return data that is not only NaN. Every problem is collected
and reported at the end, one per query, with its dashboard, panel, expression and what went wrong.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.sim import SimConfig, simulate
from tests.support.dashboards import (
    BUILTIN_VALUES,
    DASHBOARD_VALUES,
    DEFAULT_VALUES,
    PanelQuery,
    panel_queries,
    substitute,
)
from tests.support.worker_harness import Group, Stream, parse_metrics

pytestmark = pytest.mark.integration

JOB = "search-relevance-monitor"
DURATION_S = 2 * 3600.0  # event times: the last two hours
SESSIONS = 3000
#: A short join window, so that unlabelled sessions expire within the stream; every session sampled.
CONFIG_TOML = stream_toml(StreamConfig(join_window=900, budget={"head": 1e9, "torso": 1e9, "tail": 1e9}))
#: Successful scrapes of the drained worker before asking: rate() over ``$__rate_interval`` needs two.
SCRAPES_AFTER_DRAIN = 3
SCRAPE_WAIT_S = 60.0
DASHBOARD_RANGE_S = 6 * 3600  # the dashboards' default time range, now-6h .. now
STEP = BUILTIN_VALUES["__interval"]


@dataclass(frozen=True)
class Fed:
    """The worker has drained the stream and Prometheus has scraped it: ask from here."""

    prometheus: str
    start_ts: float  # event time of the stream's first record


def prometheus_api(base: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
    """GET ``/api/v1/<path>``; Prometheus's JSON answer, also for a 4xx error (status "error")."""
    url = f"{base.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = error.read().decode(errors="replace")
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {"status": "error", "errorType": f"HTTP {error.code}", "error": body[:500]}
    return answer


def instant(base: str, query: str) -> list[dict[str, Any]]:
    answer = prometheus_api(base, "query", {"query": query})
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def scrapes_since(base: str, instance: str, since: float) -> int:
    """Successful scrapes of the worker by Prometheus after ``since`` (Unix seconds)."""
    seconds = max(1, math.floor(time.time() - since))  # floor: no scrape from before ``since``
    result = instant(base, f'sum_over_time(up{{job="{JOB}", instance="{instance}"}}[{seconds}s])')
    return int(float(result[0]["value"][1])) if result else 0


def target_state(base: str, instance: str) -> str:
    targets = prometheus_api(base, "targets", {"state": "active"})["data"]["activeTargets"]
    mine = [t for t in targets if t["labels"].get("instance") == instance and t["labels"].get("job") == JOB]
    return json.dumps(mine, indent=1)[:2000] if mine else f"Prometheus has no target {JOB}/{instance}"


@pytest.fixture(scope="module")
def fed(kafka_bootstrap: str, redis_url: str, prometheus_url: str, monitor_metrics_port: int,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    start_ts = round(time.time() - DURATION_S, 3)
    result = simulate(SimConfig(seed=5, n_sessions=SESSIONS, duration_s=DURATION_S, start_ts=start_ts,
                                bucket_hint_share=1.0, invalid_rate=0.02, regression=0.10,
                                regression_bucket="tail"))
    kinds = {json.loads(e.value)["kind"] for e in result.valid_events if e.topic == "deploys"}
    assert kinds == {"deploy", "canary_start"} and result.invalid_events
    stream = Stream(kafka_bootstrap)
    group = Group(stream, redis_url, tmp_path_factory.mktemp("dashboards-live"), "dashboards", CONFIG_TOML)
    try:
        worker = group.start(port=monitor_metrics_port)
        assert stream.send(result.events) == len(result.events)
        group.drain(timeout=180.0)
        drained = time.time()
        consumed = sum(v for (name, _), v in parse_metrics(worker.metrics_text()).items()
                       if name == "search_relevance_events_total")
        assert consumed >= len(result.events)
        instance = f"127.0.0.1:{monitor_metrics_port}"
        deadline = time.monotonic() + SCRAPE_WAIT_S
        while (seen := scrapes_since(prometheus_url, instance, drained)) < SCRAPES_AFTER_DRAIN:
            assert time.monotonic() < deadline, (
                f"Prometheus scraped the drained worker {seen} times in {SCRAPE_WAIT_S:.0f} s "
                f"(wanted {SCRAPES_AFTER_DRAIN}):\n{target_state(prometheus_url, instance)}")
            time.sleep(0.5)
        scraped = instant(prometheus_url, f'sum(search_relevance_events_total{{job="{JOB}"}})')
        assert scraped and float(scraped[0]["value"][1]) == consumed, (scraped, consumed)
        yield Fed(prometheus_url, start_ts)
        assert group.restarts_seen() == []
    finally:
        group.stop()


def values_of(query: PanelQuery) -> dict[str, str]:
    """The concrete variable values :func:`panel_queries` gave this query's dashboard."""
    return {**BUILTIN_VALUES, **DEFAULT_VALUES, **DASHBOARD_VALUES.get(query.dashboard, {})}


def problem_with(query: PanelQuery, fed: Fed, now: float) -> str | None:
    """What is wrong with the answer to ``query`` (None: it succeeded and returned data)."""
    if query.source == "variable":
        answer = prometheus_api(fed.prometheus, f"label/{query.ref_id}/values",
                                {"match[]": query.expr, "start": now - DASHBOARD_RANGE_S, "end": now})
    elif query.instant:
        answer = prometheus_api(fed.prometheus, "query", {"query": query.expr, "time": now})
    else:
        answer = prometheus_api(fed.prometheus, "query_range",
                                {"query": query.expr, "start": now - DASHBOARD_RANGE_S, "end": now, "step": STEP})
    if answer.get("status") != "success":
        return f"error: {answer.get('errorType')}: {answer.get('error')}"
    if answer.get("warnings"):
        return f"warnings: {answer['warnings']}"
    data = answer["data"]
    if query.source == "variable":
        wanted = substitute(f"${{{query.title}}}", values_of(query))
        if not data:
            return f"no label values of {query.ref_id}"
        if wanted not in data:
            return f"offers {query.ref_id} = {data}, not {wanted!r} (the value the panel queries were given)"
        return None
    series = data["result"]
    if not series:
        return "no data"
    points = [s["value"] for s in series] if data["resultType"] == "vector" else [
        p for s in series for p in s["values"]]
    if not points:
        return "no data"
    if all(value == "NaN" for _, value in points):
        return f"only NaN ({len(series)} series)"
    if query.source == "annotation":
        earliest, latest = (fed.start_ts - 1) * 1000, (now + 1) * 1000
        odd = sorted({v for _, v in points if not earliest <= float(v) <= latest})
        if odd:
            return f"values {odd[:5]} are not event times in ms within the stream ({earliest:.0f}..{latest:.0f})"
    return None


def test_every_dashboard_query_is_valid_and_returns_data(fed: Fed) -> None:
    # the annotation bridge's series come from `monitor annotate`, which this stream has no Label Studio
    # for: test_annotate_agreement_e2e.py asks those queries of a Prometheus scraping a real bridge
    queries = [q for q in panel_queries() if "search_relevance_annotate_" not in q.expr]
    assert {q.source for q in queries} == {"panel", "annotation", "variable"}
    now = time.time()
    failures = []
    for query in queries:
        problem = problem_with(query, fed, now)
        if problem is not None:
            failures.append(f"{query.id}\n    expr: {query.expr}\n    {problem}")
    print(f"\n{len(queries)} dashboard queries asked, {len(failures)} failed")
    # the check tells a wrong query from a right one
    misspelt = PanelQuery("check", "panel", 0, "misspelt", "A", "", "max(search_relevance_dcgg)", False)
    unparsable = PanelQuery("check", "panel", 0, "unparsable", "A", "", "max by (bucket (up)", True)
    assert problem_with(misspelt, fed, now) == "no data"
    assert (problem_with(unparsable, fed, now) or "").startswith("error: bad_data")
    assert not failures, (f"{len(failures)} of {len(queries)} dashboard queries failed against the live "
                          "Prometheus:\n" + "\n".join(failures))
