"""Simulated annotators grading through a real Label Studio's API (issue 30, item 5), for a test and a
benchmark: the annotation loop as the bridge will see it, webhooks and all, without people.

Each simulated annotator is a Label Studio user (:func:`ensure_annotators` makes them through the admin's
API) and a :class:`~monitor.sim.raters.RaterSpec` (how it grades). :class:`AnnotatorPool` lists the
project's open tasks, gives each to an annotator who has not annotated it yet (at random among those
eligible, seeded), grades it with that annotator's spec against ``truth(task_data)`` and submits the
annotation **as that user**: ``POST /api/tasks/<id>/annotations`` with the admin's token and
``"completed_by": <user id>`` in the body. Label Studio's ``AnnotationAPI.perform_create`` sets
``completed_by`` to the requesting user only when the body has none (``if 'completed_by' not in
ser.validated_data``), and the serializer accepts any user's id, so one admin token can act for every
annotator; the test checks the stored ``completed_by``.

**Open tasks** are listed with the data manager's filter ``tasks:completed_at`` *empty* on ``GET
/api/tasks`` (``completed_at`` is the newest annotation's time when ``is_labeled``, else null), a page
at a time, with ``fields=all`` for the annotations' ``completed_by``: only tasks still waiting cross the
wire, whatever the project's size.

**Overlap, as the bridge will use it** (checked by tests/integration/test_sim_annotators.py): a task is
labelled (``is_labeled``) when its non-cancelled annotations come from at least ``overlap`` *distinct*
users (``tasks/mixins.py`` ``_get_is_labeled_value``; recomputed by the annotation ``post_save``
signal). ``PATCH /api/tasks/<id>`` goes through ``TaskSimpleSerializer``, which excludes only
``precomputed_agreement`` and ``allow_skip``: both ``overlap`` and ``is_labeled`` are writable, and a
PATCH does not recompute ``is_labeled``. So ``PATCH {"overlap": 2, "is_labeled": false}`` on a task
labelled by one annotation makes it wait for a second annotator; after two, ``PATCH {"overlap": 3,
"is_labeled": false}`` reopens it for a third, and the third user's annotation labels it again.
``PATCH {"overlap": 3}`` alone leaves a labelled task labelled (nothing recomputes the flag until the next
annotation), so ``is_labeled: false`` must go with it. Before any annotation, ``overlap`` alone is enough
(the flag is already false). A second annotation by the *same* user is stored and counted in
``total_annotations`` but does not count towards the overlap (distinct users), which is why the pool
never gives a task twice to one annotator. (``GET /api/tasks/<id>`` expands an annotation's
``completed_by`` into the user's object; the task list gives the id.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from monitor.sim.raters import RaterSpec

log = logging.getLogger(__name__)

#: the data manager's filter for tasks not yet labelled (fewer distinct annotators than their overlap)
OPEN_FILTER = json.dumps({"filters": {"conjunction": "and", "items": [
    {"filter": "filter:tasks:completed_at", "operator": "empty", "type": "Datetime", "value": True}]}})
Truth = Callable[[Mapping[str, Any]], "int | None"]


#: the grades' aliases by level, as the bridge's labelling config offers them (monitor/annotate/tasks.py
#: ``GRADES``, best first; a test checks they agree: the simulator does not import the bridge)
LEVEL_NAMES = ("无", "低", "中", "高")


class LabelStudioAPIError(RuntimeError):
    """Label Studio answered an API call with an error status; the message has the call and its body."""


def grade_name(level: int) -> str:
    """The choice's alias (``高``/``中``/``低``/``无``) of a level 3..0.

    >>> [grade_name(level) for level in range(4)]
    ['无', '低', '中', '高']
    """
    return LEVEL_NAMES[level]


def annotation_body(level: int, user_id: int) -> dict[str, Any]:
    """An annotation choosing ``level``, completed by ``user_id`` (what the labelling page submits, plus
    the annotator's id)."""
    return {"result": [{"from_name": "grade", "to_name": "query", "type": "choices",
                        "value": {"choices": [grade_name(level)]}}], "completed_by": user_id}


async def _call(session: aiohttp.ClientSession, url: str, token: str, method: str, path: str,
                payload: Any = None) -> Any:
    """One API call with the token (``Token <key>``: a legacy token); the JSON body, or None."""
    headers = {"Authorization": f"Token {token}"}
    async with session.request(method, f"{url}{path}", json=payload, headers=headers) as response:
        text = await response.text()
        if response.status >= 400:
            raise LabelStudioAPIError(f"{method} {path}: HTTP {response.status}: {text[:300]}")
    return json.loads(text) if text else None


async def ensure_annotators(url: str, token: str, names: Sequence[str]) -> dict[str, int]:
    """One Label Studio user per name (username ``name``, email ``name@annotators.invalid``), found among
    the organisation's users or created by the admin whose legacy ``token`` is given; name → user id."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        listed = await _call(session, url, token, "GET", "/api/users/?page_size=10000")
        users = listed["results"] if isinstance(listed, dict) else listed
        by_key = {}
        for user in users:
            by_key[user.get("username")] = int(user["id"])
            by_key[user.get("email")] = int(user["id"])
        out: dict[str, int] = {}
        for name in names:
            email = f"{name}@annotators.invalid"
            found = by_key.get(name) or by_key.get(email)
            if found is None:
                made = await _call(session, url, token, "POST", "/api/users/",
                                   {"username": name, "email": email, "first_name": name})
                found = int(made["id"])
            out[name] = found
        return out


@dataclass(frozen=True)
class Annotator:
    """A simulated annotator: how it grades and which Label Studio user it is."""

    spec: RaterSpec
    user_id: int


@dataclass(frozen=True)
class Submitted:
    """One annotation the pool submitted: ``submitted`` is ``time.time()`` right after the POST returned."""

    task_id: int
    annotation_id: int
    annotator: str
    level: int
    submitted: float


@dataclass
class AnnotatorPool:
    """Annotators working through a project's open tasks until :meth:`stop`, ``max_grades`` or
    ``seconds`` (module docstring). Run :meth:`run` as an asyncio task; ``grades`` is what was submitted,
    ``errors`` the submissions Label Studio refused or that failed (each logged)."""

    url: str
    token: str
    project: int
    annotators: Sequence[Annotator]
    truth: Truth
    pace: float
    """grades per second, all annotators together (submissions start ``1 / pace`` apart)"""
    started: float = field(default_factory=time.time)
    """the epoch time at which drifting annotators have drifted 0 hours"""
    seed: int = 0
    max_grades: int = 100_000
    seconds: float = 3600.0
    concurrency: int = 4
    """submissions in flight at once (Label Studio takes tens of milliseconds per annotation)"""
    page_size: int = 100
    idle_poll: float = 0.5
    grades: list[Submitted] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped_unknown: set[int] = field(default_factory=set)
    """open tasks whose truth is unknown (never graded)"""
    listings: int = 0
    listing_seconds: float = 0.0
    """pages of open tasks read and the time they took: the pool's own load on Label Studio"""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _done: dict[int, set[int]] = field(default_factory=dict)  # task → users it was given to (submitted)
    _flight: dict[int, set[int]] = field(default_factory=dict)  # task → users whose POST is under way

    def __post_init__(self) -> None:
        if not self.pace > 0 or self.concurrency < 1 or self.max_grades < 1 or not self.seconds > 0:
            raise ValueError("pace, concurrency, max_grades and seconds must be positive")
        ids = [a.user_id for a in self.annotators]
        if not ids or len(set(ids)) != len(ids):
            raise ValueError("annotators: at least one, each a different Label Studio user")
        self._rng = np.random.default_rng(self.seed)
        self._pick = random.Random(self.seed)

    def stop(self) -> None:
        """Ask :meth:`run` to end: no submission starts after this; those under way are awaited."""
        self._stop.set()

    async def run(self) -> list[Submitted]:
        """Grade open tasks at the pace until stopped or bounded; the grades submitted."""
        deadline = time.monotonic() + self.seconds
        limit = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        slot = time.monotonic()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            try:
                while not self._finished(deadline, len(running)):
                    work = await self._open_work(session)
                    if not work:
                        await self._sleep(min(self.idle_poll, deadline - time.monotonic()))
                        continue
                    for task_id, data, annotator in work:
                        slot = max(slot + 1.0 / self.pace, time.monotonic())
                        await self._sleep(slot - time.monotonic())
                        if self._finished(deadline, len(running)):
                            break
                        await limit.acquire()
                        self._flight.setdefault(task_id, set()).add(annotator.user_id)
                        job = asyncio.create_task(self._submit(session, task_id, data, annotator, limit))
                        running.add(job)
                        job.add_done_callback(running.discard)
            finally:
                if running:
                    await asyncio.gather(*running, return_exceptions=True)
        return self.grades

    def _finished(self, deadline: float, running: int) -> bool:
        return (self._stop.is_set() or time.monotonic() >= deadline
                or len(self.grades) + len(self.errors) + running >= self.max_grades)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at :meth:`stop`."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), seconds)

    async def _open_tasks(self, session: aiohttp.ClientSession, page: int) -> list[dict[str, Any]]:
        query = urllib.parse.quote(OPEN_FILTER)
        path = (f"/api/tasks?project={self.project}&page={page}&page_size={self.page_size}&fields=all"
                f"&query={query}")
        started = time.monotonic()
        try:
            body = await _call(session, self.url, self.token, "GET", path)
        except LabelStudioAPIError as error:
            if "HTTP 404" in str(error):  # past the last page
                return []
            raise
        finally:
            self.listings += 1
            self.listing_seconds += time.monotonic() - started
        return list(body["tasks"] if isinstance(body, dict) else body)

    async def _open_work(self, session: aiohttp.ClientSession) -> list[tuple[int, dict[str, Any], Annotator]]:
        """Up to a page of (task, data, annotator) to submit: for each open task no one is annotating
        now, one annotator who has not annotated it. One at a time per task: Label Studio recomputes
        ``is_labeled`` in each annotation's ``post_save`` from the annotations committed, so two submitted
        at once to a task of overlap 2 can each count one user and leave it open with both (seen in CI;
        the bridge heals such tasks, the pool should not make them)."""
        work: list[tuple[int, dict[str, Any], Annotator]] = []
        page = 1
        while len(work) < self.page_size:
            tasks = await self._open_tasks(session, page)
            for task in tasks:
                task_id = int(task["id"])
                if task_id in self.skipped_unknown:
                    continue
                data = task.get("data") or {}
                if self.truth(data) is None:
                    self.skipped_unknown.add(task_id)
                    continue
                if self._flight.get(task_id):
                    continue  # its annotation in flight first (see above)
                users = {int(a["completed_by"]) for a in task.get("annotations") or []
                         if isinstance(a.get("completed_by"), int) and not a.get("was_cancelled")}
                users |= self._done.get(task_id, set())
                eligible = [a for a in self.annotators if a.user_id not in users]
                needed = min(int(task.get("overlap") or 1) - len(users), len(eligible), 1)
                for annotator in self._pick.sample(eligible, max(0, needed)):
                    work.append((task_id, data, annotator))
            if len(tasks) < self.page_size:
                break
            page += 1
        return work

    async def _submit(self, session: aiohttp.ClientSession, task_id: int, data: Mapping[str, Any],
                      annotator: Annotator, limit: asyncio.Semaphore) -> None:
        try:
            true = self.truth(data)
            assert true is not None  # tasks of unknown truth are not handed out
            hours = (time.time() - self.started) / 3600.0
            level = int(annotator.spec.rate(np.array([true]), np.array([hours]), self._rng)[0])
            body = await _call(session, self.url, self.token, "POST", f"/api/tasks/{task_id}/annotations",
                               annotation_body(level, annotator.user_id))
            submitted = time.time()
            self.grades.append(Submitted(task_id, int(body["id"]), annotator.spec.name, level, submitted))
        except (LabelStudioAPIError, aiohttp.ClientError, TimeoutError, OSError) as error:
            self.errors.append(f"task {task_id} by {annotator.spec.name}: {error}")
            log.warning("annotation not submitted: %s", self.errors[-1])
        finally:  # given once, even if refused: a POST that timed out may still have been stored
            self._done.setdefault(task_id, set()).add(annotator.user_id)
            self._flight[task_id].discard(annotator.user_id)
            limit.release()
