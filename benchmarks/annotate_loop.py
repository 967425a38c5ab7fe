"""Benchmark: the whole annotation loop at the default budget's volume on a real Label Studio (issue 30,
item 5): requests → tasks → simulated annotators → webhook → annotation events → ``monitor worker``.

**The world**: synthetic annotation requests (10 new documents each, every pair new: each pair a task),
produced to the requests topic at ``--rate-multiple`` × the default budget's rate (2,000 sampled sessions
per bucket and hour, three buckets: 1.67 requests/s, 16.7 pairs/s) for ``--seconds``. A panel of simulated
annotators (:mod:`monitor.sim.label_studio_annotators`; by default 4 honest and 1 careless, ``--careless``,
``--drifting`` with −1 level per hour) grades the open tasks through Label Studio's API, each as its own
user, at ``--pace`` grades/s (default: the tasks' creation rate × (1 + ``--overlap``), the grades the
tasks ask for when that share of pairs goes to a second annotator). A pair's true level is a hash of its
pair key (:func:`true_level`), the same for the 200 gold pairs written to the gold file.

**The services**: Label Studio (:mod:`monitor.services.label_studio`, SQLite), Redis and one Kafka node
are started on free loopback ports in a temporary folder and stopped at the end, unless
``--label-studio-url``/``--token`` (a legacy token: the annotators act through the admin's), ``--redis-url``,
``--kafka-bootstrap`` name running ones. ``monitor annotate`` and ``monitor worker`` run as processes on
the run's own topics (the bridge gets ``MONITOR_ANNOTATE_OVERLAP`` = ``--overlap`` and
``MONITOR_ANNOTATE_GOLD`` = the gold file: settings a bridge without them ignores).

**Measured** (medians, p90, p99):

* (a) a request produced → its last task created: Label Studio's ``created_at`` of the request's tasks
  (stamped when Label Studio builds the rows of an import, so it can precede the import's commit by the
  import's duration), and tasks created per second from the bridge's counter;
* (b) an annotation submitted (``time.time()`` after the POST returned) → its annotation event read from
  the annotations topic (matched by the event's ``annotation`` id);
* (c) submitted → counted by the worker: its ``search_relevance_events_total{topic=<annotations>}``,
  sampled every 0.2 s; the k-th event read from the topic counts as counted when the counter first
  reaches k (the worker's order over partitions may differ a little: good enough at 0.2 s);
* the bridge's backlog gauge, once a second: maximum and least-squares slope over the second half of the
  producing window (flat: the bridge keeps up).

Then the series of the bridge's ``/metrics`` whose name holds ``agreement``, ``annotator`` or ``gold``.

    PYTHONPATH=. .venv/bin/python benchmarks/annotate_loop.py --seconds 120   # ~5 min on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.annotate import kafka_and_redis, start_label_studio
from monitor.annotate.tasks import pair_key
from monitor.services.label_studio import personal_access_token
from monitor.services.ports import free_port
from monitor.sim.label_studio_annotators import Annotator, AnnotatorPool, ensure_annotators, grade_name
from monitor.sim.raters import RaterSpec

STARTED = time.monotonic()
DOCS_PER_REQUEST = 10
#: the default budget: 2,000 sampled sessions per bucket and hour, three buckets
DEFAULT_REQUESTS_PER_SECOND = 3 * 2000 / 3600
GOLD_PAIRS = 200
BRIDGE_PREFIX = "search_relevance_annotate_"


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def true_level(query: str, doc_id: str) -> int:
    """The pair's true level 0..3: a hash of its pair key (deterministic, uniform over the levels)."""
    return int(hashlib.sha256(pair_key(query, doc_id).encode()).hexdigest()[:8], 16) % 4


def task_truth(data: Any) -> int | None:
    """The true level of a task's pair (None: not a pair's task)."""
    query, doc_id = data.get("query"), data.get("doc_id")
    return true_level(query, doc_id) if isinstance(query, str) and isinstance(doc_id, str) else None


def request(tag: str, i: int) -> bytes:
    """The ``i``-th request: 10 new documents (every pair new), as the worker publishes them."""
    return json.dumps({
        "type": "annotation_request", "schema": 1, "session_id": f"{tag}-s{i}", "query": f"{tag} q{i}",
        "query_bucket": ("head", "torso", "tail")[i % 3], "ranker": "ranker-a", "variant": "control",
        "k": 20, "doc_ids": [f"d-{i}-{j}" for j in range(DOCS_PER_REQUEST)], "judged": 10,
        "ts": time.time(),
        "documents": {f"d-{i}-{j}": {"title": f"Document {j} for query {i}"}
                      for j in range(DOCS_PER_REQUEST)},
    }, separators=(",", ":")).encode()


def write_gold(path: Path, tag: str) -> None:
    """``GOLD_PAIRS`` known grades ``{"query", "doc_id", "grade"}``, each its true level's name."""
    rows = []
    for i in range(GOLD_PAIRS):
        query, doc_id = f"{tag} gold q{i // 4}", f"gold-{i}"
        grade = grade_name(true_level(query, doc_id))
        rows.append(json.dumps({"query": query, "doc_id": doc_id, "grade": grade}, ensure_ascii=False))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [(s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples]


def quantiles(values: list[float]) -> str:
    """Median, p90 and p99 of ``values`` (seconds), and how many."""
    if not values:
        return "none measured"
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, math.ceil(p * len(ordered)) - 1)]
    return (f"median {statistics.median(ordered):.2f} s, p90 {q(0.9):.2f} s, p99 {q(0.99):.2f} s "
            f"(n={len(ordered)})")


def wait_http(url: str, process: subprocess.Popen[bytes], what: str, ok: Any, seconds: float = 180) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=5) as response:
            body = response.read()
            if ok(body):
                return body
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start (exit {process.poll()})")
        time.sleep(0.5)


@dataclass
class Run:
    """What one run records while it goes."""

    produced: dict[str, float] = field(default_factory=dict)  # query → time its request was sent
    events: dict[int, float] = field(default_factory=dict)  # annotation id → time its event was read
    event_order: list[float] = field(default_factory=list)  # read times, in reading order
    counted: list[tuple[float, float]] = field(default_factory=list)  # (time, worker's events counter)
    backlog: list[tuple[float, float, float]] = field(default_factory=list)  # (s, backlog, tasks created)


async def read_events(bootstrap: str, topic: str, run: Run, stop: asyncio.Event) -> None:
    """Every annotation event of the topic from its start, with the time it was read."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            now = time.time()
            for records in batches.values():
                for record in records:
                    body = json.loads(record.value or b"{}")
                    if isinstance(body.get("annotation"), int):
                        run.events[body["annotation"]] = now
                    run.event_order.append(now)
    finally:
        await consumer.stop()


async def sample(bridge_url: str, worker_url: str, topic: str, run: Run, start: float,
                 stop: asyncio.Event) -> None:
    """The worker's events counter every 0.2 s; the bridge's backlog and tasks created every second."""
    tick = 0
    while not stop.is_set():
        with contextlib.suppress(OSError, ValueError):
            found = await asyncio.to_thread(scrape, worker_url)
            count = sum(v for n, labels, v in found if n == "search_relevance_events_total"
                        and labels.get("topic") == topic)
            run.counted.append((time.time(), count))
        if tick % 5 == 0:
            with contextlib.suppress(OSError, ValueError):
                values = {n: v for n, _, v in await asyncio.to_thread(scrape, bridge_url)}
                run.backlog.append((time.monotonic() - start,
                                    values.get(f"{BRIDGE_PREFIX}backlog_requests", math.nan),
                                    values.get(f"{BRIDGE_PREFIX}tasks_created_total", 0.0)))
        tick += 1
        await asyncio.sleep(0.2)


async def produce(bootstrap: str, topic: str, rate: float, seconds: float, tag: str, run: Run) -> int:
    """Requests at ``rate`` per second for ``seconds``; how many."""
    total = int(rate * seconds)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        start = time.monotonic()
        for i in range(total):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            value = request(tag, i)
            await producer.send_and_wait(topic, value, key=f"{tag} q{i}".encode())
            run.produced[f"{tag} q{i}"] = time.time()
    finally:
        await producer.stop()
    return total


def all_tasks(url: str, token: str, project: int) -> list[dict[str, Any]]:
    """Every task of the project (id, data, created_at; no annotations)."""
    out: list[dict[str, Any]] = []
    page = 1
    while True:
        req = urllib.request.Request(f"{url}/api/tasks?project={project}&page={page}&page_size=1000",
                                     headers={"Authorization": f"Token {token}"})
        try:
            with urllib.request.urlopen(req, timeout=300) as response:
                tasks = json.loads(response.read())["tasks"]
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return out
            raise
        out.extend(tasks)
        if len(tasks) < 1000:
            return out
        page += 1


def panel(args: argparse.Namespace) -> list[RaterSpec]:
    honest = args.annotators - args.careless - args.drifting
    if honest < 0:
        raise SystemExit("--careless + --drifting exceed --annotators")
    return ([RaterSpec(f"sim-honest-{i + 1}") for i in range(honest)]
            + [RaterSpec(f"sim-careless-{i + 1}", kind="careless") for i in range(args.careless)]
            + [RaterSpec(f"sim-drifting-{i + 1}", kind="drifting", drift_per_hour=-1.0)
               for i in range(args.drifting)])


async def run_loop(args: argparse.Namespace, url: str, bridge_token: str, admin_token: str, redis_url: str,
                   bootstrap: str, folder: Path) -> None:
    rate = args.rate_multiple * DEFAULT_REQUESTS_PER_SECOND
    tasks_rate = rate * DOCS_PER_REQUEST
    pace = args.pace or tasks_rate * (1 + args.overlap)
    tag = f"loop-{uuid.uuid4().hex[:8]}"
    topics = {name: f"{name}-{tag}" for name in ("requests", "annotations", "impressions", "deploys", "dead")}
    token_file = folder / f"token-{tag}"
    token_file.write_text(bridge_token + "\n")
    gold = folder / f"gold-{tag}.jsonl"
    write_gold(gold, tag)
    bridge_port, worker_port = free_port(), free_port()
    common = {**os.environ, "MONITOR_KAFKA_BOOTSTRAP": bootstrap, "MONITOR_REDIS_URL": redis_url,
              "MONITOR_APP_ID": tag, "MONITOR_REDIS_PREFIX": tag,
              "MONITOR_TOPIC_REQUESTS": topics["requests"],
              "MONITOR_TOPIC_ANNOTATIONS": topics["annotations"],
              "MONITOR_TOPIC_IMPRESSIONS": topics["impressions"], "MONITOR_TOPIC_DEPLOYS": topics["deploys"],
              "MONITOR_TOPIC_DEAD_LETTERS": topics["dead"], "MONITOR_PARTITIONS": "4",
              "MONITOR_LOG_LEVEL": "warning"}
    bridge_env = {**common, "MONITOR_LABEL_STUDIO_URL": url,
                  "MONITOR_LABEL_STUDIO_TOKEN_FILE": str(token_file),
                  "MONITOR_ANNOTATE_SECRET": "benchmark", "MONITOR_ANNOTATE_PORT": str(bridge_port),
                  "MONITOR_ANNOTATE_PROJECT": f"annotate loop {tag}",
                  "MONITOR_ANNOTATE_OVERLAP": str(args.overlap), "MONITOR_ANNOTATE_GOLD": str(gold)}
    worker_env = {**common, "MONITOR_HTTP_PORT": str(worker_port), "MONITOR_DATADIR": str(folder / "worker")}
    bridge_url, worker_url = f"http://127.0.0.1:{bridge_port}", f"http://127.0.0.1:{worker_port}"
    processes: list[subprocess.Popen[bytes]] = []
    logs = []
    log_dir = args.log_dir or folder
    log_dir.mkdir(parents=True, exist_ok=True)
    run = Run()
    stop = asyncio.Event()
    project = 0
    try:
        for name, env in (("bridge", bridge_env), ("worker", worker_env)):
            logs.append((log_dir / f"{name}-{tag}.log").open("wb"))
            processes.append(subprocess.Popen([sys.executable, "-m", "monitor",
                                               "annotate" if name == "bridge" else "worker"],
                                              env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
            if name == "bridge":  # it makes the topics; the worker then finds them with their partitions
                body = await asyncio.to_thread(wait_http, f"{bridge_url}/healthz", processes[0], "the bridge",
                                               lambda b: json.loads(b).get("project") is not None)
                project = int(json.loads(body)["project"])
        await asyncio.to_thread(wait_http, f"{worker_url}/readyz", processes[1], "the worker", lambda b: True)
        await asyncio.sleep(3.0)  # the bridge's consumer joins its group
        specs = panel(args)
        users = await ensure_annotators(url, admin_token, [s.name for s in specs])
        start_wall = time.time()
        annotators = [Annotator(s, users[s.name]) for s in specs]
        pool = AnnotatorPool(url, admin_token, project, annotators, task_truth, pace=pace, started=start_wall,
                             seed=args.seed,
                             seconds=args.seconds + args.drain_seconds, concurrency=args.concurrency)
        say(f"project {project}: {rate:.2f} requests/s ({tasks_rate:.1f} pairs/s) for {args.seconds:.0f} s; "
            f"{len(specs)} annotators at {pace:.1f} grades/s")
        start = time.monotonic()
        background = [
            asyncio.create_task(read_events(bootstrap, topics["annotations"], run, stop)),
            asyncio.create_task(sample(bridge_url, worker_url, topics["annotations"], run, start, stop))]
        grading = asyncio.create_task(pool.run())
        total = await produce(bootstrap, topics["requests"], rate, args.seconds, tag, run)
        say(f"{total} requests produced; waiting for the loop to drain (at most {args.drain_seconds:.0f} s)")
        deadline = time.monotonic() + args.drain_seconds
        while time.monotonic() < deadline and not grading.done():
            created = run.backlog[-1][2] if run.backlog else 0.0
            counted = run.counted[-1][1] if run.counted else 0.0
            graded = {g.annotation_id for g in pool.grades}
            if (created >= total * DOCS_PER_REQUEST and len(pool.grades) >= created
                    and graded <= run.events.keys() and counted >= len(run.event_order)):
                break
            await asyncio.sleep(1.0)
        say("drained" if time.monotonic() < deadline else "not drained by the deadline: figures as they are")
        pool.stop()
        await grading
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*background)
        bridge_metrics = await asyncio.to_thread(scrape, bridge_url)
        tasks = await asyncio.to_thread(all_tasks, url, admin_token, project)
    finally:
        stop.set()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()
    report(args, rate, pace, specs, total, start_wall, run, pool, tasks, bridge_metrics)


def report(args: argparse.Namespace, rate: float, pace: float, specs: list[RaterSpec], total: int,
           start_wall: float, run: Run, pool: AnnotatorPool, tasks: list[dict[str, Any]],
           bridge_metrics: list[tuple[str, dict[str, str], float]]) -> None:
    first_task: dict[str, dict[str, float]] = defaultdict(dict)  # query → doc → its first task's time
    tasks_per_pair: dict[tuple[str, str], int] = defaultdict(int)
    for task in tasks:
        data = task.get("data") or {}
        query, doc_id = data.get("query"), str(data.get("doc_id"))
        if isinstance(query, str) and query in run.produced:
            at = datetime.fromisoformat(task["created_at"]).timestamp()
            first_task[query][doc_id] = min(at, first_task[query].get(doc_id, at))
            tasks_per_pair[query, doc_id] += 1
    to_tasks = [max(docs.values()) - run.produced[q] for q, docs in first_task.items()
                if len(docs) == DOCS_PER_REQUEST]
    ours = [t for t in tasks if (t.get("data") or {}).get("query") in run.produced]
    stamps = sorted(datetime.fromisoformat(t["created_at"]).timestamp() for t in ours)
    to_event = [run.events[g.annotation_id] - g.submitted for g in pool.grades
                if g.annotation_id in run.events]
    order = sorted(run.event_order)
    when: dict[int, float] = {}
    for at, count in run.counted:  # the k-th event read is counted when the counter first reaches k
        for k in range(len(when) + 1, min(int(count), len(order)) + 1):
            when[k] = at
    read_rank = {t: i + 1 for i, t in enumerate(order)}  # read time → its rank (ties: the last)
    to_worker = []
    for g in pool.grades:
        read = run.events.get(g.annotation_id)
        if read is not None and read_rank[read] in when:
            to_worker.append(when[read_rank[read]] - g.submitted)
    during = [b for b in run.backlog if b[0] <= args.seconds]
    half = [b for b in during if b[0] >= args.seconds / 2 and not math.isnan(b[1])]
    slope = statistics.linear_regression([b[0] / 60 for b in half], [b[1] for b in half]).slope \
        if len(half) >= 2 else math.nan
    kinds = ", ".join(f"{sum(s.kind == k for s in specs)} {k}" for k in ("honest", "careless", "drifting")
                      if any(s.kind == k for s in specs))
    labelled = sum(1 for t in ours if t.get("is_labeled"))
    drift = "; drifting: -1 level/hour" if args.drifting else ""
    print(f"World: synthetic annotation requests at {args.rate_multiple:g}x the default budget's rate "
          f"({rate:.2f} requests/s, {DOCS_PER_REQUEST} new pairs each) for {args.seconds:.0f} s; "
          f"{len(specs)} simulated annotators ({kinds}{drift}) "
          f"at {pace:.1f} grades/s; "
          f"overlap share passed to the bridge {args.overlap:g}, gold file of {GOLD_PAIRS} pairs; "
          f"truth = hash of the pair key.")
    print(f"Requests produced: {total}; tasks of them in Label Studio: {len(ours)} of "
          f"{total * DOCS_PER_REQUEST} "
          f"({labelled} labelled); pairs with more than one task: "
          f"{sum(n > 1 for n in tasks_per_pair.values())}; all tasks in the project: {len(tasks)}")
    if len(stamps) >= 2:
        print(f"Tasks created per second (Label Studio created_at, first to last): "
              f"{(len(stamps) - 1) / (stamps[-1] - stamps[0]):.2f}")
    steady = [b for b in during if b[0] >= 10]
    if len(steady) >= 2 and steady[-1][0] > steady[0][0]:
        print(f"Tasks created per second (the bridge's counter, from 10 s to the last request): "
              f"{(steady[-1][2] - steady[0][2]) / (steady[-1][0] - steady[0][0]):.2f}")
    print(f"(a) request produced -> its 10 tasks created (created_at): {quantiles(to_tasks)}")
    print(f"Annotations submitted: {len(pool.grades)} ({len(pool.errors)} refused or failed); "
          f"annotation events read: {len(run.event_order)}; submitted ones with their event: {len(to_event)}")
    print(f"(b) annotation submitted -> its event on the annotations topic: {quantiles(to_event)}")
    print(f"(c) annotation submitted -> counted by the worker (0.2 s samples): {quantiles(to_worker)}; "
          f"worker's counter at the end: {int(run.counted[-1][1]) if run.counted else 'never read'}")
    shown = ("webhooks", "grades", "errors", "tasks_created")
    counters = {n + "".join(f"{{{v}}}" for v in labels.values()): value
                for n, labels, value in bridge_metrics
                if n.startswith(BRIDGE_PREFIX) and n.endswith("_total") and any(w in n for w in shown)}
    print("Bridge counters at the end: " + ", ".join(f"{k.removeprefix(BRIDGE_PREFIX)} {v:g}"
                                                     for k, v in sorted(counters.items())))
    times = sorted(g.submitted for g in pool.grades)
    if len(times) >= 2:
        print(f"Grades submitted per second (first to last): {(len(times) - 1) / (times[-1] - times[0]):.2f} "
              f"(pace asked: {pace:.1f})")
    print(f"Pool's listings of open tasks: {pool.listings} pages, {pool.listing_seconds:.1f} s in all")
    print(f"Bridge backlog (requests): max {max((b[1] for b in during), default=math.nan):g}, "
          f"slope over the second half {slope:+.3f} requests/min ({len(half)} samples)")
    by_kind: dict[str, list[int]] = defaultdict(list)
    for g in pool.grades:
        by_kind[g.annotator.rsplit("-", 1)[0]].append(g.level)
    print("Grades per annotator kind: " + ", ".join(f"{k}: {len(v)}" for k, v in sorted(by_kind.items())))
    wanted = [(n, labels, v) for n, labels, v in bridge_metrics
              if any(word in n for word in ("agreement", "annotator", "gold"))]
    print("Bridge /metrics, agreement/annotator/gold series:" + ("" if wanted else " none exported"))
    for name, labels, value in wanted:
        print(f"  {name}{{{','.join(f'{k}={v!r}' for k, v in labels.items())}}} {value:g}")
    if pool.errors:
        print(f"First refused annotation: {pool.errors[0]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label-studio-url")
    parser.add_argument("--token", help="a legacy token (the admin's) of --label-studio-url")
    parser.add_argument("--redis-url")
    parser.add_argument("--kafka-bootstrap")
    parser.add_argument("--seconds", type=float, default=300.0, help="how long requests are produced")
    parser.add_argument("--drain-seconds", type=float, default=120.0,
                        help="at most this long after the last request for the loop to drain")
    parser.add_argument("--rate-multiple", type=float, default=1.0,
                        help="the request rate as a multiple of the default budget's")
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--careless", type=int, default=1)
    parser.add_argument("--drifting", type=int, default=0)
    parser.add_argument("--pace", type=float, default=0.0,
                        help="grades per second (default: tasks per second x (1 + --overlap))")
    parser.add_argument("--overlap", type=float, default=0.1,
                        help="share of pairs the bridge sends to two annotators (MONITOR_ANNOTATE_OVERLAP)")
    parser.add_argument("--concurrency", type=int, default=4, help="annotations in flight at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", type=Path, help="keep the bridge's and the worker's logs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="annotate-loop-") as folder:
        servers: list[Any] = []
        try:
            url, admin_token = args.label_studio_url, args.token
            bridge_token = admin_token
            if not url:
                ls_server = start_label_studio(Path(folder), servers)
                url, admin_token = ls_server.address, ls_server.legacy_token
                bridge_token = personal_access_token(ls_server).read_text().strip()
            bootstrap, redis_url = kafka_and_redis(args, Path(folder), servers)
            say(f"Label Studio at {url}, Redis at {redis_url}, Kafka at {bootstrap}")
            asyncio.run(run_loop(args, url, bridge_token, admin_token, redis_url, bootstrap, Path(folder)))
        finally:
            for server in reversed(servers):
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
