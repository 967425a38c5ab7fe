"""Benchmark: Label Studio tasks per second made by ``monitor annotate``'s bridge (issue 30), bulk imports
against one-by-one creation as the peer, in the same run, against a real Label Studio; then the backlog
while requests arrive at the default budget's rate.

**Label Studio** is the local server of :mod:`monitor.services.label_studio` (SQLite, from ``.venv-ls``),
started on a free loopback port in a temporary folder and stopped at the end (``--label-studio-url`` and
``--token``, a legacy token, name a running one instead). **Redis** and **Kafka** (one KRaft node) are
started the same way (``--redis-url``, ``--kafka-bootstrap`` name running ones). Each tasks/s measurement
uses a new project set up by :meth:`monitor.annotate.bridge.Bridge.setup` (the labelling config and the
webhook, annotation actions only, to a port nothing listens on: no webhook is called while tasks are made).

**The requests** are annotation requests as the worker publishes them, each for 10 documents (about the
unjudged documents per sampled session seen in issue 30), all pairs new: the worst case for the bridge,
every pair a task.

**Tasks per second**, each repeat on a fresh project, the order of the two alternating:

* *bulk*: :meth:`Bridge.handle_requests` on ``--bulk-requests`` requests at once (one batch of the
  bridge's consumer holds up to 500): the pairs' tasks in imports of ``--import-size`` tasks, each a
  ``POST /api/projects/<id>/import``, and their ids into Redis;
* *one by one*: the bridge before this issue, one ``POST /api/tasks`` and one ``HSET`` per pair, on
  ``--one-by-one-requests`` requests.

The median of ``--repeats`` of each, and the median of the per-repeat ratios, are printed.

**Keeping up**: ``monitor annotate`` runs as a process over Kafka (its own topics, which it creates
itself with 4 partitions, its own project), and requests are produced at ``--rate-multiple`` × the default
budget's rate (2,000 sampled sessions per bucket and hour, three buckets: 1.67 requests/s, 16.7 pairs/s;
by default 1× and 20×) for ``--paced-seconds`` each. Its ``/metrics`` is read once a second: the backlog
(``search_relevance_annotate_backlog_requests``), the oldest request's age and the tasks created. Flat: the
least-squares slope of the backlog over the second half, in requests per minute, and its maximum; then
how long after the last request every task exists.

    PYTHONPATH=. .venv/bin/python benchmarks/annotate.py            # ~8 min on the 2-core machine
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from monitor.annotate.bridge import Bridge, Pending
from monitor.annotate.client import LabelStudio
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.settings import AnnotateSettings
from monitor.annotate.tasks import Document, parse_request, task_data
from monitor.services.kafka import KafkaServer
from monitor.services.label_studio import LabelStudioServer, personal_access_token
from monitor.services.ports import free_port
from monitor.services.redis_server import RedisServer
from monitor.worker.settings import WorkerSettings

STARTED = time.monotonic()
DOCS_PER_REQUEST = 10
#: the default budget: 2,000 sampled sessions per bucket and hour, three buckets
DEFAULT_REQUESTS_PER_SECOND = 3 * 2000 / 3600


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def requests(count: int, tag: str) -> list[bytes]:
    """``count`` requests of 10 new documents each (every pair new), as the worker publishes them."""
    out = []
    for i in range(count):
        out.append(json.dumps({
            "type": "annotation_request", "schema": 1, "session_id": f"{tag}-s{i}", "query": f"{tag} q{i}",
            "query_bucket": ("head", "torso", "tail")[i % 3], "ranker": "ranker-a", "variant": "control",
            "k": 20, "doc_ids": [f"d-{i}-{j}" for j in range(DOCS_PER_REQUEST)], "judged": 10,
            "ts": time.time(),
            "documents": {f"d-{i}-{j}": {"title": f"Document {j} for query {i}"}
                          for j in range(DOCS_PER_REQUEST)},
        }, separators=(",", ":")).encode())
    return out


def new_bridge(settings: AnnotateSettings, ls: LabelStudio, redis: Redis, tag: str) -> Bridge:
    async def produce(key: bytes, value: bytes) -> None:  # no grades are made here
        raise AssertionError("the benchmark produces no grades")

    project_settings = replace(settings, project=f"benchmark {tag}")
    return Bridge(project_settings, ls, redis, produce, BridgeMetrics(CollectorRegistry()))


async def bulk(bridge: Bridge, values: list[bytes]) -> float:
    await bridge.setup()
    started = time.perf_counter()
    await bridge.handle_requests(values)
    elapsed = time.perf_counter() - started
    created = bridge.metrics.tasks_created._value.get()
    assert created == len(values) * DOCS_PER_REQUEST, created
    return created / elapsed


async def one_by_one(bridge: Bridge, values: list[bytes]) -> float:
    """The bridge's creation before bulk imports: a request per task, its id into Redis."""
    project = await bridge.setup()
    started = time.perf_counter()
    pending = Pending()
    for raw in values:
        pending.add(parse_request(raw))
    known = await bridge.redis.hmget(bridge._key("tasks"), list(pending.pairs))
    created = 0
    for (key, (request, doc_id, sessions)), task in zip(pending.pairs.items(), known, strict=True):
        if task is None:
            data = task_data(request, doc_id, Document(title=doc_id), sessions)
            task_id = await bridge.ls.create_task(project, data)
            await bridge.redis.hset(bridge._key("tasks"), key, task_id)
            created += 1
    elapsed = time.perf_counter() - started
    assert created == len(values) * DOCS_PER_REQUEST
    return created / elapsed


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name.startswith("search_relevance_annotate_")}


async def live(args: argparse.Namespace, multiple: float, url: str, token: str, redis_url: str,
               bootstrap: str, folder: Path) -> dict[str, Any]:
    """``monitor annotate`` as a process over real Kafka: requests produced at the rate, its /metrics read
    once a second (backlog, oldest request's age, tasks created)."""
    rate = multiple * DEFAULT_REQUESTS_PER_SECOND
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    token_file = folder / f"token-{tag}"
    token_file.write_text(token + "\n")
    env = {**os.environ, "MONITOR_KAFKA_BOOTSTRAP": bootstrap, "MONITOR_REDIS_URL": redis_url,
           "MONITOR_APP_ID": f"bench-{tag}", "MONITOR_REDIS_PREFIX": f"bench-{tag}",
           "MONITOR_TOPIC_REQUESTS": f"requests-{tag}", "MONITOR_TOPIC_ANNOTATIONS": f"annotations-{tag}",
           "MONITOR_TOPIC_IMPRESSIONS": f"impressions-{tag}", "MONITOR_TOPIC_DEPLOYS": f"deploys-{tag}",
           "MONITOR_TOPIC_DEAD_LETTERS": f"dead-{tag}", "MONITOR_PARTITIONS": "4",
           "MONITOR_LABEL_STUDIO_URL": url, "MONITOR_LABEL_STUDIO_TOKEN_FILE": str(token_file),
           "MONITOR_ANNOTATE_SECRET": "benchmark", "MONITOR_ANNOTATE_PORT": str(port),
           "MONITOR_ANNOTATE_PROJECT": f"benchmark live {tag}", "MONITOR_LOG_LEVEL": "warning"}
    log = (folder / f"bridge-{tag}.log").open("wb")
    bridge = subprocess.Popen([sys.executable, "-m", "monitor", "annotate"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        deadline = time.monotonic() + 180
        while True:  # ready: the project known and the requests topic made by the bridge itself
            with contextlib.suppress(OSError, ValueError), \
                    urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
                if json.loads(response.read()).get("project") is not None:
                    break
            if bridge.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the bridge did not start; see {log.name}")
            await asyncio.sleep(0.5)
        await asyncio.sleep(3.0)  # its consumer joins the group
        await producer.start()
        total = int(rate * args.paced_seconds)
        values = requests(total, f"live-{tag}")
        start = time.monotonic()
        samples: list[tuple[float, float, float, float]] = []  # (s, backlog, oldest age, tasks created)
        sent = 0
        while True:
            now = time.monotonic() - start
            due = min(total, int(rate * now) + 1)
            for value in values[sent:due]:
                await producer.send(env["MONITOR_TOPIC_REQUESTS"], value, key=value[:40])
            sent = due
            found = await asyncio.to_thread(scrape, base)
            samples.append((now, found.get("search_relevance_annotate_backlog_requests", math.nan),
                            found.get("search_relevance_annotate_oldest_request_age_seconds", math.nan),
                            found.get("search_relevance_annotate_tasks_created_total", 0.0)))
            if sent >= total and samples[-1][3] >= total * DOCS_PER_REQUEST:
                break
            if now > args.paced_seconds + 120:
                raise RuntimeError(f"no catching up 120 s after the last request ({samples[-1]})")
            await asyncio.sleep(max(0.0, start + len(samples) - time.monotonic()))
    finally:
        await producer.stop()
        bridge.terminate()
        bridge.wait(timeout=60)
        log.close()
    during = [s for s in samples if s[0] <= args.paced_seconds]
    half = [s for s in during if s[0] >= args.paced_seconds / 2]
    slope = statistics.linear_regression([s[0] / 60 for s in half], [s[1] for s in half]).slope
    created = [s for s in during if s[0] >= 10]
    return {"requests_per_second": round(rate, 3), "requests": total, "pairs": total * DOCS_PER_REQUEST,
            "seconds": round(samples[-1][0], 1), "scrapes": len(samples),
            "backlog_max": max(s[1] for s in during),
            "backlog_mean": round(statistics.fmean(s[1] for s in during), 2),
            "backlog_slope_per_min_2nd_half": round(slope, 3),
            "oldest_age_max_s": round(max(s[2] for s in during), 2),
            "tasks_per_second_from_counter": round((created[-1][3] - created[0][3])
                                                   / (created[-1][0] - created[0][0]), 2),
            "tasks_created": int(samples[-1][3]),
            "caught_up_after_last_request_s": round(samples[-1][0] - total / rate, 1)}


async def run(args: argparse.Namespace, url: str, token: str, redis_url: str, bootstrap: str,
              folder: Path) -> dict[str, Any]:
    worker = replace(WorkerSettings(), redis_url=redis_url, redis_prefix=f"bench-{uuid.uuid4().hex[:6]}")
    settings = AnnotateSettings(worker=worker, label_studio_url=url, label_studio_token=token, secret="x",
                                webhook_url=f"http://127.0.0.1:{free_port()}/webhook",
                                import_size=args.import_size)
    redis = Redis.from_url(redis_url)
    bulk_rates: list[float] = []
    single_rates: list[float] = []
    try:
        async with LabelStudio(url, token, timeout=300.0) as ls:
            for repeat in range(args.repeats):
                order = ("bulk", "one") if repeat % 2 == 0 else ("one", "bulk")
                for which in order:
                    tag = f"{which}-{repeat}-{uuid.uuid4().hex[:6]}"
                    if which == "bulk":
                        rate = await bulk(new_bridge(settings, ls, redis, tag),
                                          requests(args.bulk_requests, tag))
                        bulk_rates.append(rate)
                    else:
                        rate = await one_by_one(new_bridge(settings, ls, redis, tag),
                                                requests(args.one_by_one_requests, tag))
                        single_rates.append(rate)
                    say(f"repeat {repeat + 1}: {which}: {rate:.1f} tasks/s")
    finally:
        await redis.aclose()
    keeping_up = []
    for multiple in args.rate_multiple:
        rate = multiple * DEFAULT_REQUESTS_PER_SECOND
        say(f"keeping up: monitor annotate over Kafka, {rate:.2f} requests/s ({rate * DOCS_PER_REQUEST:.1f} "
            f"pairs/s) for {args.paced_seconds:.0f} s")
        keeping_up.append({"rate_multiple": multiple,
                           **await live(args, multiple, url, token, redis_url, bootstrap, folder)})
        say(f"keeping up: {keeping_up[-1]}")
    ratios = [b / s for b, s in zip(bulk_rates, single_rates, strict=True)]
    return {
        "tasks_per_second": {"bulk": [round(r, 1) for r in bulk_rates],
                             "one_by_one": [round(r, 1) for r in single_rates],
                             "bulk_median": round(statistics.median(bulk_rates), 1),
                             "one_by_one_median": round(statistics.median(single_rates), 1),
                             "ratio_median": round(statistics.median(ratios), 1)},
        "bulk_tasks_per_repeat": args.bulk_requests * DOCS_PER_REQUEST,
        "one_by_one_tasks_per_repeat": args.one_by_one_requests * DOCS_PER_REQUEST,
        "import_size": args.import_size,
        "keeping_up": keeping_up,
    }


def started(server: Any, servers: list[Any]) -> Any:
    """``server`` started and answering, added to ``servers`` (stopped at the end, last first)."""
    servers.append(server)
    server.start(die_with_parent=True)
    server.wait_ready()
    return server


def start_label_studio(folder: Path, servers: list[Any]) -> LabelStudioServer:
    """A Label Studio of its own in ``folder`` (SQLite), for a run without ``--label-studio-url``."""
    say("starting Label Studio (the first start applies its migrations: about a minute)")
    server: LabelStudioServer = started(LabelStudioServer(folder / "ls", free_port()), servers)
    return server


def kafka_and_redis(args: argparse.Namespace, folder: Path, servers: list[Any]) -> tuple[str, str]:
    """The Kafka bootstrap and the Redis URL: ``--kafka-bootstrap`` and ``--redis-url``, or servers of
    their own started in ``folder``."""
    bootstrap = args.kafka_bootstrap or started(KafkaServer(folder / "kafka", free_port(), free_port()),
                                                servers).address
    redis_url = args.redis_url or started(RedisServer(folder / "redis", free_port()), servers).address
    return str(bootstrap), str(redis_url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label-studio-url")
    parser.add_argument("--token", help="a legacy token or personal access token of --label-studio-url")
    parser.add_argument("--redis-url")
    parser.add_argument("--kafka-bootstrap")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bulk-requests", type=int, default=200,
                        help="requests per bulk repeat (10 pairs each)")
    parser.add_argument("--one-by-one-requests", type=int, default=20)
    parser.add_argument("--import-size", type=int, default=500)
    parser.add_argument("--rate-multiple", type=float, nargs="+", default=[1.0, 20.0],
                        help="request rates to keep up with, as multiples of the default budget's")
    parser.add_argument("--paced-seconds", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="annotate-bench-") as folder:
        servers: list[Any] = []
        try:
            url, token = args.label_studio_url, args.token
            if not url:
                ls_server = start_label_studio(Path(folder), servers)
                url, token = ls_server.address, personal_access_token(ls_server).read_text().strip()
            bootstrap, redis_url = kafka_and_redis(args, Path(folder), servers)
            say(f"Label Studio at {url}, Redis at {redis_url}, Kafka at {bootstrap}")
            result = asyncio.run(run(args, url, token, redis_url, bootstrap, Path(folder)))
        finally:
            for server in reversed(servers):
                server.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
