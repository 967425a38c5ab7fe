"""Benchmark: Label Studio tasks per second made by ``monitor annotate``'s bridge (issue 30), bulk imports
against one-by-one creation as the peer, in the same run, against a real Label Studio; then the backlog
while requests arrive at the default budget's rate.

**Label Studio** is the local server of :mod:`monitor.services.label_studio` (SQLite, from ``.venv-ls``),
started on a free loopback port in a temporary folder and stopped at the end (``--label-studio-url`` and
``--token``, a legacy token, name a running one instead). **Redis** is a ``redis-server`` started the same
way (``--redis-url`` names one): the bridge keeps the pair → task map there. Each measurement uses a new
project set up by :meth:`monitor.annotate.bridge.Bridge.setup` (the labelling config and the webhook,
annotation actions only, to a port nothing listens on: no webhook is called while tasks are made).

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

**Keeping up**: requests arrive at ``--rate-multiple`` × the default budget's rate (2,000 sampled sessions
per bucket and hour, three buckets: 1.67 requests/s, 16.7 pairs/s) for ``--paced-seconds``; once a second
the bridge takes what arrived (as its consumer does), and the backlog (requests arrived and not yet
handled) and the oldest waiting request's age are sampled. Flat: the least-squares slope of the backlog
over the second half, in requests per minute, and its maximum.

    PYTHONPATH=. .venv/bin/python benchmarks/annotate.py            # ~6 min on the 2-core machine
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from monitor.annotate.bridge import Bridge, Pending
from monitor.annotate.client import LabelStudio
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.settings import AnnotateSettings
from monitor.annotate.tasks import Document, parse_request, task_data
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


async def paced(bridge: Bridge, rate: float, seconds: float) -> dict[str, Any]:
    """Requests arrive at ``rate`` per second; once a second the bridge handles what arrived."""
    await bridge.setup()
    total = int(rate * seconds)
    values = requests(total, f"paced-{uuid.uuid4().hex[:6]}")
    start = time.monotonic()
    handled = 0
    samples: list[tuple[float, int, float]] = []  # (seconds since start, backlog, oldest age)
    while handled < total:
        now = time.monotonic() - start
        arrived = min(total, int(rate * now))
        oldest_age = now - handled / rate if arrived > handled else 0.0
        samples.append((now, arrived - handled, oldest_age))
        batch = values[handled:min(arrived, handled + 500)]
        if batch:
            await bridge.handle_requests(batch)
            handled += len(batch)
        next_tick = start + now + 1.0
        await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
    half = [s for s in samples if s[0] >= seconds / 2]
    xs, ys = [s[0] / 60 for s in half], [float(s[1]) for s in half]
    slope = statistics.linear_regression(xs, ys).slope if len(half) > 2 else float("nan")
    return {"requests": total, "pairs": total * DOCS_PER_REQUEST,
            "seconds": round(time.monotonic() - start, 1),
            "backlog_max": max(s[1] for s in samples), "backlog_slope_per_min_2nd_half": round(slope, 3),
            "oldest_age_max_s": round(max(s[2] for s in samples), 2),
            "tasks_created": int(bridge.metrics.tasks_created._value.get())}


async def run(args: argparse.Namespace, url: str, token: str, redis_url: str) -> dict[str, Any]:
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
            rate = args.rate_multiple * DEFAULT_REQUESTS_PER_SECOND
            say(f"keeping up: {rate:.2f} requests/s ({rate * DOCS_PER_REQUEST:.1f} pairs/s) for "
                f"{args.paced_seconds:.0f} s")
            keeping_up = await paced(new_bridge(settings, ls, redis, f"paced-{uuid.uuid4().hex[:6]}"), rate,
                                     args.paced_seconds)
    finally:
        await redis.aclose()
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
        "keeping_up": {"rate_multiple": args.rate_multiple, **keeping_up},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label-studio-url")
    parser.add_argument("--token", help="a legacy token or personal access token of --label-studio-url")
    parser.add_argument("--redis-url")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bulk-requests", type=int, default=200,
                        help="requests per bulk repeat (10 pairs each)")
    parser.add_argument("--one-by-one-requests", type=int, default=20)
    parser.add_argument("--import-size", type=int, default=500)
    parser.add_argument("--rate-multiple", type=float, default=1.0)
    parser.add_argument("--paced-seconds", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="annotate-bench-") as folder:
        servers: list[Any] = []
        try:
            url, token = args.label_studio_url, args.token
            if not url:
                say("starting Label Studio (the first start applies its migrations: about a minute)")
                ls_server = LabelStudioServer(Path(folder) / "ls", free_port())
                servers.append(ls_server)
                ls_server.start(die_with_parent=True)
                ls_server.wait_ready()
                url, token = ls_server.address, personal_access_token(ls_server).read_text().strip()
            redis_url = args.redis_url
            if not redis_url:
                redis_server = RedisServer(Path(folder) / "redis", free_port())
                servers.append(redis_server)
                redis_server.start(die_with_parent=True)
                redis_server.wait_ready()
                redis_url = redis_server.address
            say(f"Label Studio at {url}, Redis at {redis_url}")
            result = asyncio.run(run(args, url, token, redis_url))
        finally:
            for server in reversed(servers):
                server.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
