"""The bridge's work: requests → Label Studio tasks, Label Studio annotations → annotation events.

Longer than 400 lines because both directions share one project's Redis state and its per-task locks:
the start-up walk records tasks the request path made and syncs grades the webhook path missed, and
the overlap and gold tasks the request path makes are what the webhook path measures.

State lives in Redis (``<prefix>:annotate:<project>:…``; on a Redis Cluster ``…:annotate:{<project>}:…``,
one slot per project, so that the two hashes written in one transaction can be), so a bridge killed and
restarted neither loses nor repeats anything:

* ``tasks``: pair key → task id. A pair with a task gets no second one. A task created just before a crash
  (before its id was written here) is found again by :meth:`Bridge.reconcile`, which runs at start before
  any request is read and records every task of the project;
* ``sent``: task id → the identity (annotation id, change time, grade) of the last grade produced for it.
  A webhook delivered twice, or a reconciliation after one, finds the same identity and produces nothing;
* ``sent_ts``: task id → the ``ts`` that grade was produced with. The stream keeps the grade with the
  latest ``ts`` (docs/events.md), so a grade produced after it is never given an earlier one: when a
  deletion makes an older annotation the pair's grade again, it is sent with the last ``ts`` sent (a tie,
  which the later delivered wins), not with its own older change time, which would lose;
* ``annotations``: annotation id → task id, for deletions (Label Studio's delete webhook names only the
  annotation);
* rater quality: ``quality:…`` (:mod:`monitor.annotate.quality`), ``overlap``, task id → the overlap the
  bridge asked for, and ``counts``, the ordinary and gold tasks made (for the gold share).

Which grade a pair gets when several annotators graded it, when a second and a third annotator are asked,
and what agreement is measured on, is :mod:`monitor.annotate.ratings` (the policy of
:mod:`monitor.core.agreement.policy`): the overlap share of pairs is sent to two annotators when their
task is made, a pair whose two grades differ by more than a step is reopened for a third, and gold tasks
are mixed in after each import so that ``gold_share`` of the tasks are gold; a gold task's grade is
counted against its known grade and never produced as an annotation event.

Request offsets are committed to Kafka only after every task of the batch exists; while Label Studio is
down the batch is retried (with a growing pause) and nothing after it is read, so requests wait.
A grade is produced (and acknowledged by Kafka) before it is recorded as sent: at least once, and a
repeat (after a crash between the two) is the identical grade, which changes nothing in the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from redis.asyncio import RedisCluster

from monitor.annotate.client import LabelStudio, LabelStudioError
from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.quality import RaterCounts
from monitor.annotate.ratings import choice, contribution, in_overlap, ratings, wanted_overlap
from monitor.annotate.settings import SECRET_HEADER, AnnotateSettings, GoldPair
from monitor.annotate.tasks import (
    LABEL_CONFIG,
    WEBHOOK_ACTIONS,
    Document,
    GradeGiven,
    RequestError,
    describe,
    pair_key,
    parse_request,
    request_document,
    task_data,
)
from monitor.core.agreement.policy import gold_to_add
from monitor.core.agreement.tally import RaterTally
from monitor.store.client import RedisClient

log = logging.getLogger("monitor.annotate")

Produce = Callable[[bytes, bytes], Awaitable[None]]
#: a task with nothing to show is logged at its first occurrence and then once per this many
WARN_EVERY = 1000
#: a gold task's ``pair`` starts with this (then its gold pair's key and its number), so that it is never
#: taken for a requested pair's task
GOLD_PREFIX = "gold:"
#: overlap requests to Label Studio at once (:meth:`Bridge.apply_overlaps`)
OVERLAP_WORKERS = 4
T = TypeVar("T")


def gold_task_data(gold: GoldPair, number: int, fallback: Document) -> dict[str, Any]:
    """The ``data`` of the ``number``-th gold task, for ``gold``: what annotators see is made as for any
    task (the gold file's title, snippet and URL, else the documents file's or the URL template's)."""
    document = gold.document.or_else(fallback)
    data: dict[str, Any] = {
        "query": gold.query, "doc_id": gold.doc_id, "document": describe(gold.doc_id, document),
        "pair": f"{GOLD_PREFIX}{pair_key(gold.query, gold.doc_id)}:{number}", "bucket": gold.bucket,
        "sessions": [], "session_count": 0,
    }
    for name in ("title", "snippet", "url"):
        if getattr(document, name):
            data[name] = getattr(document, name)
    return data


def annotation_event(query: str, doc_id: str, given: GradeGiven, task_id: int,
                     session_id: str | None = None, ts: float | None = None) -> bytes:
    """The annotation event for a pair's grade (docs/events.md), with its provenance: query-level, or for
    one session (``session_id``, session scope); ``ts``: the event's (default: the grade's change time)."""
    scope: dict[str, str] = {"query": query} if session_id is None else {"session_id": session_id}
    body: dict[str, Any] = {
        "type": "annotation", "schema": 1, **scope,
        "grades": [{"doc_id": doc_id, "grade": given.grade}], "ts": given.ts if ts is None else ts,
        "source": "label-studio", "task": task_id, "annotation": given.annotation_id,
    }
    if given.annotator is not None:
        body["annotator"] = given.annotator
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def event_ts(given: GradeGiven, sent: str | None, sent_ts: str | None) -> float:
    """The ``ts`` to produce ``given`` with: its change time, but never earlier than the ``ts`` of the
    grade last produced for the pair (``sent``: its identity; ``sent_ts``: the ts it was produced with,
    absent in state written before it was kept), so the stream's latest-``ts`` rule lets it win.

    >>> event_ts(GradeGiven(5, "高", 100.0, None), "6|200.0|无", "200.0")
    200.0
    >>> event_ts(GradeGiven(6, "低", 300.0, None), "6|200.0|无", None)
    300.0
    """
    last = [float(sent_ts)] if sent_ts else []
    if sent:
        with contextlib.suppress(IndexError, ValueError):
            last.append(float(sent.split("|", 2)[1]))
    return max([given.ts, *last])


@dataclass
class Pending:
    """The pairs of a batch of requests still to be given a task, in the order first asked, and how many
    times pairs were asked for (``asked``: every document of every request, repeats included)."""

    pairs: OrderedDict[str, tuple[dict[str, Any], str, list[str]]] = field(default_factory=OrderedDict)
    asked: int = 0

    def add(self, request: dict[str, Any]) -> None:
        for doc_id in request["doc_ids"]:
            self.asked += 1
            key = pair_key(request["query"], doc_id)
            if key not in self.pairs:
                self.pairs[key] = (request, doc_id, [])
            sessions = self.pairs[key][2]
            if request["session_id"] not in sessions:
                sessions.append(request["session_id"])


class Bridge:
    """One project's bridge; ``produce(key, value)`` sends an annotation event and waits for the ack."""

    def __init__(self, settings: AnnotateSettings, ls: LabelStudio, redis: RedisClient, produce: Produce,
                 metrics: BridgeMetrics) -> None:
        self.settings = settings
        self.ls = ls
        self.redis = redis
        self.produce = produce
        self.metrics = metrics
        self.project: int | None = None
        self.session_scope = settings.scope == "session"
        self._locks: dict[int, asyncio.Lock] = {}
        self.counts = RaterCounts(redis, settings.agreement_window)
        #: new tasks of the overlap share waiting for their second annotator to be asked
        self.overlaps: asyncio.Queue[int] = asyncio.Queue()
        self._without_text = 0

    def _key(self, name: str) -> str:
        project = f"{{{self.project}}}" if isinstance(self.redis, RedisCluster) else str(self.project)
        return f"{self.settings.redis_prefix}:{project}:{name}"

    async def setup(self) -> int:
        """Find or create the project and its webhook (with the shared secret header, for the annotation
        actions only: a task's creation calls nothing); return its id."""
        self.project = await self.ls.find_or_create_project(self.settings.project, LABEL_CONFIG)
        await self.ls.ensure_webhook(self.project, self.settings.webhook_url,
                                     {SECRET_HEADER: self.settings.secret}, WEBHOOK_ACTIONS)
        log.info("Label Studio project %s (%r), webhook to %s", self.project, self.settings.project,
                 self.settings.webhook_url)
        return self.project

    # requests → tasks ----------------------------------------------------------------------------------
    async def handle_requests(self, values: Sequence[bytes]) -> None:
        """Give every (query, document) pair of these requests a task, once: the new pairs in bulk imports
        of at most ``import_size`` tasks each; retried until it is done."""
        pending = Pending()
        for raw in values:
            try:
                pending.add(parse_request(raw))
            except RequestError as error:
                self.metrics.requests.labels(outcome="invalid").inc()
                log.warning("annotation request refused: %s", error)
                continue
            self.metrics.requests.labels(outcome="used").inc()
        if not pending.pairs:
            return
        self.metrics.pairs_requested.inc(pending.asked)
        keys = list(pending.pairs)
        known = await self.redis.hmget(self._key("tasks"), keys)
        added: list[int] = [0] * len(keys)
        if self.session_scope:
            pipe = self.redis.pipeline(transaction=False)
            for key, (_, _, sessions) in pending.pairs.items():
                pipe.sadd(self._key(f"sessions:{key}"), *sessions)
            added = [int(n) for n in await pipe.execute()]
        graded_again: list[int] = []  # session scope: known pairs asked for by new sessions
        new: list[tuple[str, dict[str, Any]]] = []
        for (key, (request, doc_id, sessions)), task, more in zip(pending.pairs.items(), known, added,
                                                                  strict=True):
            if task is not None:
                if more:
                    graded_again.append(int(task))
                continue
            document = request_document(request, doc_id).or_else(self.settings.document(doc_id))
            if document.shows_nothing():
                self._nothing_to_show(str(request["query"]), doc_id)
            new.append((key, task_data(request, doc_id, document, sessions)))
        self.metrics.pairs_known.inc(pending.asked - len(new))
        size = self.settings.import_size
        for start in range(0, len(new), size):
            await self._import(new[start:start + size])
        for task_id in graded_again:  # their grade, if there is one already, for the new sessions
            await self._retrying(functools.partial(self.sync_task, task_id))

    def _nothing_to_show(self, query: str, doc_id: str) -> None:
        self.metrics.tasks_without_text.inc()
        self._without_text += 1
        if (self._without_text - 1) % WARN_EVERY == 0:
            log.warning("NOTHING TO SHOW: the task for (%r, %r) has no title, snippet or URL, so annotators "
                        "see only the document id (%d such tasks since start; logged once per %d). Send "
                        "title/snippet/url on the impression's results, or set MONITOR_ANNOTATE_DOCUMENTS or "
                        "MONITOR_ANNOTATE_DOC_URL (docs/annotate.md)", query, doc_id, self._without_text,
                        WARN_EVERY)

    async def _import(self, chunk: list[tuple[str, dict[str, Any]]]) -> None:
        """Create the tasks of ``chunk`` (pair key, task data) in one import and record their ids.

        A failed import may have been applied all the same (a timeout after Label Studio saved the tasks),
        so before it is retried the tasks created since it was sent are read back (their pairs recorded,
        as the start-up walk would) and only the pairs still without a task are imported again."""
        pause, check, sent = 0.5, False, time.monotonic()
        while True:
            try:
                if check:
                    chunk = await self._not_imported(chunk, time.monotonic() - sent)
                    check = False
                    if not chunk:
                        return
                sent = time.monotonic()
                ids = await self.ls.import_tasks(self._project(), [data for _, data in chunk])
                break
            except LabelStudioError as error:
                self.metrics.label_studio_errors.inc()
                log.warning("Label Studio: %s; retrying in %.1f s", error, pause)
                await asyncio.sleep(pause)
                pause, check = min(pause * 2, 30.0), True
        await self.redis.hset(self._key("tasks"), mapping={key: task for (key, _), task in
                                                           zip(chunk, ids, strict=True)})
        self.metrics.task_imports.inc()
        self.metrics.tasks_created.inc(len(ids))
        for (key, _), task_id in zip(chunk, ids, strict=True):
            if in_overlap(key, self.settings.overlap_share):
                self.overlaps.put_nowait(task_id)
        await self._mix_gold(len(ids))

    async def apply_overlaps(self, workers: int = OVERLAP_WORKERS) -> None:
        """Ask Label Studio for two annotators on each new task of the overlap share, ``workers`` at a
        time, for ever. Off the import path: a task's PATCH costs Label Studio about what creating it
        one by one did (benchmarks/annotate.py), so doing them in line capped task creation below 100
        tasks/s. Until its PATCH lands a task is open to one annotator, whose grade the sync counts and
        who is then joined by a second. A crash loses the queue; the walk over tasks made since the
        checkpoint asks again (:meth:`reconcile`)."""
        async def work() -> None:
            while True:
                task_id = await self.overlaps.get()
                try:
                    await self._retrying(functools.partial(self._overlap_at_import, task_id))
                finally:
                    self.overlaps.task_done()

        await asyncio.gather(*(work() for _ in range(workers)))

    async def _mix_gold(self, made: int) -> None:
        """After ``made`` ordinary tasks: import the gold tasks that keep ``gold_share`` of all tasks gold
        (``policy.gold_to_add``), going round the gold file's pairs in a fixed order."""
        if not self.settings.gold or self.settings.gold_share <= 0.0:
            return
        tasks = int(await self.redis.hincrby(self._key("counts"), "tasks", made))
        gold = int(await self.redis.hget(self._key("counts"), "gold") or 0)
        add = gold_to_add(tasks, gold, self.settings.gold_share)
        if not add:
            return
        pairs = [self.settings.gold[key] for key in sorted(self.settings.gold)]
        chosen = [pairs[n % len(pairs)] for n in range(gold, gold + add)]
        datas = [gold_task_data(pair, n, self.settings.document(pair.doc_id))
                 for n, pair in zip(range(gold, gold + add), chosen, strict=True)]
        await self._retrying(functools.partial(self.ls.import_tasks, self._project(), datas))
        await self.redis.hincrby(self._key("counts"), "gold", add)
        self.metrics.gold_tasks.inc(add)

    async def _overlap_at_import(self, task_id: int) -> None:
        """Two annotators for a new task of the overlap share, under the task's lock: a sync of a grade
        given meanwhile (the task was open with overlap 1 for a moment) has then asked already, and
        this does not reopen the task after its second grade."""
        async with self._locks.setdefault(task_id, asyncio.Lock()):
            await self._ensure_overlap(task_id, 1, 2, 0, None)

    async def _ensure_overlap(self, task_id: int, have: int, wanted: int, graded: int,
                              labeled: bool | None) -> None:
        """Ask ``wanted`` annotators for the task if it has fewer (``have``: Label Studio's ``overlap``;
        the bridge's own record of what it asked counts too). Called under the task's lock, with
        ``graded`` (distinct annotators) and ``labeled`` (Label Studio's flag; None: not read) as just
        read. A task whose flag says open although enough annotators graded it (a request that crossed
        an annotation's save) is marked done, so it does not wait for ever."""
        asked = await self.redis.hget(self._key("overlap"), str(task_id))
        held = max(have, int(asked) if asked is not None else 1)
        if wanted <= held:
            if labeled is False and graded >= held:
                await self.ls.set_overlap(task_id, held, labeled=True)
            return
        await self.ls.set_overlap(task_id, wanted, labeled=graded >= wanted)
        await self.redis.hset(self._key("overlap"), str(task_id), wanted)
        if wanted == 2:
            self.metrics.overlap_tasks.inc()
        else:
            self.metrics.third_opinions.inc()

    async def _not_imported(self, chunk: list[tuple[str, dict[str, Any]]],
                            ago: float) -> list[tuple[str, dict[str, Any]]]:
        """The entries of ``chunk`` whose pair has no task, after recording the pairs of the tasks created
        since the failed import was sent (``ago`` seconds ago, on Label Studio's clock less a margin)."""
        since = await self.ls.server_time() - timedelta(seconds=ago + 5.0)
        wanted = {key for key, _ in chunk}
        found: dict[str, int] = {}
        async for task in self.ls.tasks(self._project(), since=since):
            data = task.get("data") or {}
            if data.get("pair") in wanted and isinstance(task.get("id"), int):
                found.setdefault(data["pair"], task["id"])
        if found:
            await self.redis.hset(self._key("tasks"), mapping={k: v for k, v in found.items()})
            log.info("%d tasks of a failed import exist; the rest (%d) are imported again", len(found),
                     len(chunk) - len(found))
        return [(key, data) for key, data in chunk if key not in found]

    def _project(self) -> int:
        if self.project is None:
            raise RuntimeError("Bridge.setup() has not run")
        return self.project

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        pause = 0.5
        while True:
            try:
                return await call()
            except LabelStudioError as error:
                self.metrics.label_studio_errors.inc()
                log.warning("Label Studio: %s; retrying in %.1f s", error, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)

    # annotations → events ------------------------------------------------------------------------------
    async def sync_task(self, task_id: int, task: Mapping[str, Any] | None = None) -> bool:
        """Produce the task's current grade if it is not the last one produced; True if one was."""
        lock = self._locks.setdefault(task_id, asyncio.Lock())
        async with lock:
            if task is None or "annotations" not in task:
                task = await self.ls.task(task_id)  # with its annotations: one request
                if task is None:
                    return False
                if not isinstance(task.get("annotations"), list):
                    task = {**task, "annotations": await self.ls.annotations(task_id)}
            annotations = list(task["annotations"])
            data = task.get("data") or {}
            query, doc_id = data.get("query"), data.get("doc_id")
            if not isinstance(query, str) or not isinstance(doc_id, str):
                return False  # not one of the bridge's tasks
            for annotation in annotations:
                if isinstance(annotation, dict) and isinstance(annotation.get("id"), int):
                    await self.redis.hset(self._key("annotations"), str(annotation["id"]), task_id)
            found = data.get("pair")
            pair = found if isinstance(found, str) else pair_key(query, doc_id)
            gold = self.settings.gold.get(pair_key(query, doc_id)) if pair.startswith(GOLD_PREFIX) else None
            if pair.startswith(GOLD_PREFIX) and gold is None:
                return False  # a gold pair no longer in the gold file: neither counted nor produced
            grades = ratings(annotations)
            overlapped = gold is None and in_overlap(pair, self.settings.overlap_share)
            counted = contribution(grades, bucket=data.get("bucket"), overlapped=overlapped,
                                   known=None if gold is None else gold.level)
            await self.counts.replace(self._key, task_id, counted, grades)
            if gold is not None:
                return False  # a gold task's grade is measured, not produced
            have = task.get("overlap")
            labeled = task.get("is_labeled")
            await self._ensure_overlap(task_id, have if isinstance(have, int) else 1,
                                       wanted_overlap(overlapped, grades), len(grades),
                                       labeled if isinstance(labeled, bool) else None)
            given = choice(grades)
            if given is None:
                return False  # none yet, or every annotation deleted: the last grade sent stands
            if self.session_scope:
                return await self._send_to_sessions(task_id, data, given)
            sent = await self.redis.hget(self._key("sent"), str(task_id))
            if sent is not None and (sent.decode() if isinstance(sent, bytes) else sent) == given.identity():
                return False
            ts = await self._event_ts(str(task_id), sent, given)
            await self.produce(query.encode(), annotation_event(query, doc_id, given, task_id, ts=ts))
            await self._record_sent(str(task_id), given, ts)
            self.metrics.grades_produced.inc()
            return True

    async def _send_to_sessions(self, task_id: int, data: Mapping[str, Any], given: GradeGiven) -> bool:
        """Session scope: the grade as each asking session's own, keyed by the session; once per session."""
        query, doc_id = str(data["query"]), str(data["doc_id"])
        members = await self.redis.smembers(self._key(f"sessions:{pair_key(query, doc_id)}"))
        sessions = {m.decode() if isinstance(m, bytes) else str(m) for m in members}
        sessions |= {s for s in data.get("sessions") or [] if isinstance(s, str)}  # if Redis lost the set
        produced = False
        for session_id in sorted(sessions):
            field = f"{task_id}|{session_id}"
            sent = await self.redis.hget(self._key("sent"), field)
            if sent is not None and (sent.decode() if isinstance(sent, bytes) else sent) == given.identity():
                continue
            ts = await self._event_ts(field, sent, given)
            await self.produce(session_id.encode(),
                               annotation_event(query, doc_id, given, task_id, session_id=session_id, ts=ts))
            await self._record_sent(field, given, ts)
            self.metrics.grades_produced.inc()
            produced = True
        return produced

    async def _event_ts(self, field: str, sent: Any, given: GradeGiven) -> float:
        stored = await self.redis.hget(self._key("sent_ts"), field)
        return event_ts(given, None if sent is None else _str(sent), None if stored is None else _str(stored))

    async def _record_sent(self, field: str, given: GradeGiven, ts: float) -> None:
        pipe = self.redis.pipeline(transaction=True)  # both or neither
        pipe.hset(self._key("sent"), field, given.identity())
        pipe.hset(self._key("sent_ts"), field, repr(ts))
        await pipe.execute()

    async def quality(self, now: float | None = None) -> RaterTally:
        """The rater-quality counts of the agreement window (:meth:`RaterCounts.window`)."""
        return await self.counts.window(self._key, now)

    async def refresh_quality(self) -> None:
        """Set the rater-quality gauges from :meth:`quality` (at each scrape of ``/metrics``)."""
        if self.project is None:
            return
        self.metrics.show_quality(await self.quality(), self.settings.thresholds,
                                  keep=self.settings.max_annotators, salt=self.settings.annotator_salt)

    async def task_of_annotation(self, annotation_id: int) -> int | None:
        found = await self.redis.hget(self._key("annotations"), str(annotation_id))
        return int(found) if found is not None else None

    async def reconcile(self) -> int:
        """Walk the project's tasks updated since the start of the last complete walk (all of them when
        there was none): record each one's pair and produce grades not produced yet (missed webhooks, a
        crash between a task's creation and its record). Returns how many grades it produced.

        The checkpoint is Label Studio's own clock (its ``Date`` header) at the start of the walk, less
        2 s for the header's whole seconds, so an annotation saved during a walk is in the next one.
        """
        started = await self.ls.server_time() - timedelta(seconds=2)
        checkpoint = await self.redis.get(self._key("checkpoint"))
        since = None
        if checkpoint is not None:
            text = checkpoint.decode() if isinstance(checkpoint, bytes) else str(checkpoint)
            since = datetime.fromisoformat(text)
        produced = 0
        async for task in self.ls.tasks(self._project(), since=since):
            data = task.get("data") or {}
            if isinstance(data.get("pair"), str) and isinstance(task.get("id"), int):
                if not data["pair"].startswith(GOLD_PREFIX):
                    await self.redis.hsetnx(self._key("tasks"), data["pair"], task["id"])
                if task.get("annotations"):
                    if await self.sync_task(task["id"], task):
                        produced += 1
                elif (not data["pair"].startswith(GOLD_PREFIX)  # a crash before it was asked for two
                      and in_overlap(data["pair"], self.settings.overlap_share)):
                    have = task.get("overlap")
                    async with self._locks.setdefault(task["id"], asyncio.Lock()):
                        await self._ensure_overlap(task["id"], have if isinstance(have, int) else 1, 2, 0,
                                                   None)
        await self.redis.set(self._key("checkpoint"), started.isoformat())
        self.metrics.reconciliations.inc()
        return produced


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
