"""Rater quality end to end (issue 30, item 4): the bridge against a real Label Studio, Redis, Prometheus
and Alertmanager, with simulated annotators grading through Label Studio's API as four users.

The bridge runs in this process (its HTTP endpoints on a free port: Label Studio calls its webhook for
every annotation), its annotation events are kept in a list instead of Kafka (tests/integration/
test_annotate_e2e.py runs the bridge process over Kafka). It is set up as a user would: an overlap share, a
gold file, and thresholds; only the least counts are lowered (and the overlap share raised) so that a few
hundred annotations are enough. Prometheus scrapes it with the shipped configuration and rule file, whose
``for: 30m`` is cut to seconds in the copy it loads (promtool's tests in deploy/prometheus/tests hold the
30 minutes).

What must hold, each against a recomputation from Label Studio's own record of the annotations (no bridge
code but the policy's pure functions):

* the overlap share of pairs has two annotators, pairs whose two grades are more than a step apart got a
  third, gold tasks are ``gold_share`` of the tasks and never become annotation events;
* the grade sent for each pair is the policy's choice over its annotators' grades;
* the counts in Redis are exactly the tasks' contributions, and the gauges are ``assess`` of them;
* with one annotator answering at random, that annotator's kappa and the alert are low and fire; with
  honest annotators nothing is low and nothing fires;
* the pipeline dashboard's "Annotators" row returns data from this Prometheus (the live dashboard test
  has no bridge to scrape).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import urllib.error
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from monitor.annotate.bridge import GOLD_PREFIX, Bridge
from monitor.annotate.client import LabelStudio
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.ratings import LEVELS, choice, contribution, in_overlap, ratings, wanted_overlap
from monitor.annotate.settings import AnnotateSettings, GoldPair
from monitor.annotate.tasks import Document, pair_key
from monitor.annotate.webhook import BridgeHttp
from monitor.core.agreement.identity import annotator_label
from monitor.core.agreement.policy import gold_to_add
from monitor.core.agreement.tally import RaterTally, RaterThresholds, assess
from monitor.services.ports import free_port
from monitor.services.prometheus import CONFIG, PrometheusServer, render_config
from monitor.sim.label_studio_annotators import OPEN_FILTER, Annotator, AnnotatorPool, ensure_annotators
from monitor.sim.raters import RaterSpec
from monitor.store.client import connect
from monitor.worker.settings import WorkerSettings
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)
from tests.support.dashboards import panel_queries
from tests.support.worker_harness import http_request, parse_metrics

pytestmark = pytest.mark.integration

PAIRS = 200
GOLD_PAIRS = 40
OVERLAP = 0.5
GOLD_SHARE = 0.2
THRESHOLDS = RaterThresholds(min_units=20, min_pairs=20, min_gold=8)
ALERT = "SearchRelevanceRaterAgreementLow"
RULES = CONFIG.parent / "rules" / "annotate.yml"


def truth(query: str, doc_id: str) -> int:
    """The pair's true level: fixed by the pair, spread over the four levels."""
    return int(hashlib.sha256(f"{query}|{doc_id}".encode()).hexdigest()[:8], 16) % LEVELS


def requests() -> list[bytes]:
    out = []
    for i in range(PAIRS // 10):
        body = {"type": "annotation_request", "schema": 1, "session_id": f"s-{i}", "query": f"q{i}",
                "query_bucket": "head" if i % 2 else "tail", "ranker": "r", "variant": "control", "k": 10,
                "doc_ids": [f"d{i}-{j}" for j in range(10)], "judged": 0, "ts": time.time()}
        out.append(json.dumps(body).encode())
    return out


def gold_pairs() -> dict[str, GoldPair]:
    pairs = [GoldPair(f"gold query {i}", f"g-{i}", truth(f"gold query {i}", f"g-{i}"),
                      Document(title=f"Gold document {i}")) for i in range(GOLD_PAIRS)]
    return {pair_key(g.query, g.doc_id): g for g in pairs}


class RulesPrometheus(PrometheusServer):
    """The shipped configuration, scraping the bridge at ``bridge`` (the annotate job's target), with the
    rule file's copy whose agreement alert waits ``for`` seconds instead of 30 minutes."""

    def __init__(self, workdir: Path, port: int, *, alertmanager: str, bridge: str) -> None:
        super().__init__(workdir, port, alertmanager=alertmanager, scrape_interval="1s")
        self.bridge = bridge

    def write_config(self) -> None:
        (self.dir / "data").mkdir(exist_ok=True)
        rules = self.dir / "rules"
        rules.mkdir(exist_ok=True)
        text = RULES.read_text()
        start = text.index(f"alert: {ALERT}")
        assert text.count("for: 30m") == 1 and text.index("for: 30m") > start
        (rules / "annotate.yml").write_text(text.replace("for: 30m", "for: 3s"))
        rendered = render_config(CONFIG.read_text(), prometheus=self.host_port, alertmanager=self.alertmanager,
                                 metrics=f"127.0.0.1:{free_port()}", rules_dir=rules, scrape_interval="1s")
        assert rendered.count('"127.0.0.1:9465"') == 1
        (self.dir / "prometheus.yml").write_text(rendered.replace('"127.0.0.1:9465"', f'"{self.bridge}"'))


def prometheus_api(base: str, path: str, params: Mapping[str, Any]) -> Any:
    query = urllib.parse.urlencode(params)
    return http_request(f"{base}/api/v1/{path}?{query}").json()


def offline(tasks: list[dict[str, Any]], gold: Mapping[str, GoldPair]) -> tuple[RaterTally, dict[str, str]]:
    """From Label Studio's record alone: the rater-quality counts, and each pair's chosen grade."""
    tally, chosen = RaterTally(LEVELS), {}
    for task in tasks:
        data, grades = task["data"], ratings(task["annotations"])
        known = gold.get(pair_key(data["query"], data["doc_id"])) if data["pair"].startswith(GOLD_PREFIX) else None
        overlapped = known is None and in_overlap(data["pair"], OVERLAP)
        tally.merge(contribution(grades, bucket=data["bucket"], overlapped=overlapped,
                                 known=None if known is None else known.level))
        given = choice(grades)
        if known is None and given is not None:
            chosen[data["pair"]] = given.grade
    return tally, chosen


def open_tasks(handle: LabelStudioHandle, project: int) -> list[dict[str, Any]]:
    """The first tasks still waiting for an annotator (Label Studio's filter, as the annotators list
    them): id, overlap and who graded them, for messages."""
    query = urllib.parse.quote(OPEN_FILTER)
    try:
        body = handle.api("GET", f"/api/tasks?project={project}&page_size=20&fields=all&query={query}")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return []
        raise
    return [{"id": t["id"], "overlap": t["overlap"], "by": [a["completed_by"] for a in t["annotations"]]}
            for t in body["tasks"]]


@pytest.mark.parametrize("careless", [False, True], ids=["honest", "one-careless"])
async def test_agreement_is_measured_from_label_studio_and_a_careless_annotator_fires_the_alert(
        label_studio: LabelStudioHandle, redis_url: str, alertmanager_url: str, tmp_path: Path,  # noqa: F811
        careless: bool) -> None:
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    gold = gold_pairs()
    settings = AnnotateSettings(
        worker=replace(WorkerSettings(), redis_url=redis_url, redis_prefix=f"test-{tag}"),
        label_studio_url=label_studio.url, label_studio_token=label_studio.access_token, secret="sec",
        project=f"agreement {tag}", webhook_url=f"http://127.0.0.1:{port}/webhook", overlap_share=OVERLAP,
        gold=gold, gold_share=GOLD_SHARE, thresholds=THRESHOLDS, annotator_salt=tag)
    produced: list[dict[str, Any]] = []

    async def produce(key: bytes, value: bytes) -> None:
        produced.append(json.loads(value))

    names = [f"rater-{tag}-{i}" for i in range(4)]
    users = await ensure_annotators(label_studio.url, label_studio.legacy_token, names)
    specs = [RaterSpec(n, noise=0.1) for n in names[:3]]
    specs.append(RaterSpec(names[3], kind="careless") if careless else RaterSpec(names[3], noise=0.1))
    odd = annotator_label(users[names[3]], tag)
    redis = connect(redis_url)
    prometheus: RulesPrometheus | None = None
    runner: web.AppRunner | None = None
    drain: asyncio.Task[None] | None = None
    overlaps: asyncio.Task[None] | None = None
    try:
        async with LabelStudio(label_studio.url, label_studio.access_token) as ls:
            bridge = Bridge(settings, ls, redis, produce, BridgeMetrics(registry := CollectorRegistry()))
            http = BridgeHttp(bridge, registry, settings.secret)
            runner = web.AppRunner(http.app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            drain = asyncio.create_task(http.drain())
            overlaps = asyncio.create_task(bridge.apply_overlaps())
            project = await bridge.setup()
            await bridge.handle_requests(requests())
            await asyncio.wait_for(bridge.overlaps.join(), 120)  # the second annotators asked

            # 1. tasks: the overlap share asks two annotators, gold tasks are the gold share
            tasks = await asyncio.to_thread(label_studio.tasks, project)
            pairs = [t for t in tasks if not t["data"]["pair"].startswith(GOLD_PREFIX)]
            golds = [t for t in tasks if t["data"]["pair"].startswith(GOLD_PREFIX)]
            assert len(pairs) == PAIRS and len(golds) == gold_to_add(PAIRS, 0, GOLD_SHARE) == 50
            assert {t["data"]["pair"] for t in pairs if t["overlap"] == 2} == {
                t["data"]["pair"] for t in pairs if in_overlap(t["data"]["pair"], OVERLAP)}
            assert all(t["overlap"] == 1 for t in golds) and 70 < sum(t["overlap"] == 2 for t in pairs) < 130
            assert all(t["data"]["title"].startswith("Gold document") for t in golds)

            def known(data: Mapping[str, Any]) -> int | None:
                return truth(data["query"], data["doc_id"])

            pool = AnnotatorPool(label_studio.url, label_studio.legacy_token, project,
                                 [Annotator(spec, users[spec.name]) for spec in specs], known, pace=40.0,
                                 seed=7, seconds=300.0, concurrency=3)
            grading = asyncio.create_task(pool.run())
            # 2. until every task has its annotators, thirds included, and every webhook is synced
            quiet_since, deadline = None, time.monotonic() + 280
            while True:
                waiting = await asyncio.to_thread(open_tasks, label_studio, project)
                assert time.monotonic() < deadline, (
                    f"the annotators did not finish within 280 s: {len(pool.grades)} grades, {len(pool.errors)} "
                    f"errors, {http.queue.qsize()} webhooks queued, tasks open: {waiting}")
                assert not grading.done(), grading.exception() if grading.done() else None
                idle = not waiting and http.idle()
                quiet_since = (quiet_since or time.monotonic()) if idle else None
                if quiet_since is not None and time.monotonic() - quiet_since > 4.0:
                    break
                await asyncio.sleep(1.0)
            pool.stop()
            await grading
            assert not pool.errors

            tasks = await asyncio.to_thread(label_studio.tasks, project)
            tally, chosen = offline(tasks, gold)
            for task in tasks:
                grades = ratings(task["annotations"])
                is_gold = task["data"]["pair"].startswith(GOLD_PREFIX)
                want = 1 if is_gold else wanted_overlap(in_overlap(task["data"]["pair"], OVERLAP), grades)
                assert task["overlap"] == want and len(grades) == want, task["id"]
            if careless:  # a random grade is more than a step from an honest one a third of the time
                assert sum(1 for t in tasks if t["overlap"] == 3) >= 5

            # 3. the grade sent for each pair is the policy's; gold tasks send none
            last: dict[str, str] = {}
            for event in sorted(produced, key=lambda e: e["ts"]):
                last[pair_key(event["query"], event["grades"][0]["doc_id"])] = event["grades"][0]["grade"]
            assert last == chosen and not any(e["query"].startswith("gold query") for e in produced)

            # 4. the counts in Redis and the gauges on /metrics
            assert await bridge.quality() == tally
            scrape = await asyncio.to_thread(http_request, f"http://127.0.0.1:{port}/metrics")  # served here
            samples = parse_metrics(scrape.body.decode())

            def gauge(name: str, **labels: str) -> float | None:
                return samples.get((f"search_relevance_annotate_{name}", tuple(sorted(labels.items()))))

            labels = {str(uid): annotator_label(uid, tag) for uid in users.values()}
            shown = tally.merged_by({rater: labels.get(rater, rater) for rater in
                                     tally.peers.keys() | tally.gold.keys()})
            findings = assess(shown, THRESHOLDS)
            for finding in findings:
                if finding.measure == "alpha" and finding.value is not None:
                    assert gauge("agreement_alpha", bucket=finding.key) == pytest.approx(finding.value)
                if finding.measure == "kappa" and finding.value is not None:
                    assert gauge("annotator_kappa", annotator=finding.key) == pytest.approx(finding.value)
                bucket, annotator = (finding.key, "") if finding.scope == "bucket" else ("", finding.key)
                low = gauge("agreement_low", measure=finding.measure, bucket=bucket, annotator=annotator)
                assert low == ({"low": 1.0, "ok": 0.0}.get(finding.status)), finding
            statuses = {(f.measure, f.key): f.status for f in findings}
            assert statuses[("alpha", "all")] != "inconclusive" and statuses[("kappa", odd)] != "inconclusive"
            if careless:
                assert statuses[("kappa", odd)] == "low"
            else:
                assert "low" not in statuses.values(), findings

            # 5. Prometheus with the shipped rule: fires for the careless annotator, stays quiet otherwise
            prometheus = RulesPrometheus(tmp_path / "prometheus", free_port(),
                                         alertmanager=alertmanager_url.removeprefix("http://"),
                                         bridge=f"127.0.0.1:{port}")
            prometheus.start()
            await asyncio.to_thread(prometheus.wait_ready, 60)
            base = prometheus.address

            def alerts() -> list[dict[str, Any]]:
                body = prometheus_api(base, "alerts", {})
                return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == ALERT]

            def scraped() -> bool:
                found = prometheus_api(base, "query", {"query": "count(search_relevance_annotate_agreement_low)"})
                return bool(found["data"]["result"])

            deadline = time.monotonic() + 60
            while not scraped():
                assert time.monotonic() < deadline, "Prometheus never scraped the bridge's rater series"
                await asyncio.sleep(0.5)
            if careless:
                deadline = time.monotonic() + 60
                while not [a for a in alerts() if a["state"] == "firing" and a["labels"].get("annotator") == odd]:
                    assert time.monotonic() < deadline, f"{ALERT} did not fire for {odd}: {alerts()}"
                    await asyncio.sleep(0.5)
                filter_ = urllib.parse.quote(f'alertname="{ALERT}"')
                deadline = time.monotonic() + 60
                while True:
                    received = http_request(f"{alertmanager_url}/api/v2/alerts?filter={filter_}").json()
                    mine = [a for a in received if a["labels"].get("annotator") == odd]
                    if mine:
                        break
                    assert time.monotonic() < deadline, "Alertmanager never received the alert"
                    await asyncio.sleep(0.5)
                assert mine[0]["annotations"]["runbook_url"].endswith(f"/{ALERT}.md")
                assert mine[0]["labels"]["measure"] in ("kappa", "gold_exact")
            else:
                await asyncio.sleep(8.0)  # more than the rule's 3 s, at 1 s evaluations
                assert alerts() == []

            # 6. the dashboard's Annotators row has data here
            row = [q for q in panel_queries() if "search_relevance_annotate_" in q.expr]
            assert len(row) >= 6
            now = time.time()
            for query in row:
                answer = prometheus_api(base, "query", {"query": query.expr, "time": now})
                assert answer["status"] == "success" and answer["data"]["result"], query.expr
    finally:
        for job in (drain, overlaps):
            if job is not None:
                job.cancel()
        if runner is not None:
            await runner.cleanup()
        if prometheus is not None:
            prometheus.stop()
        await redis.aclose()
