"""Simulated annotators on a real Label Studio (monitor/sim/label_studio_annotators.py): each task gets
exactly ``overlap`` annotations from distinct simulated users, stored as completed by them; honest
annotators stay within one level of the truth; the overlap/is_labeled PATCHes the bridge relies on open a
task for a second and a third annotator; a stopped pool submits nothing more.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import uuid
from typing import Any

import pytest

from monitor.annotate.tasks import LABEL_CONFIG, grade_of_choice, pair_key
from monitor.sim.label_studio_annotators import (
    OPEN_FILTER,
    Annotator,
    AnnotatorPool,
    ensure_annotators,
    grade_name,
)
from monitor.sim.raters import RaterSpec
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

SPECS = (RaterSpec("sim-honest-1"), RaterSpec("sim-honest-2"), RaterSpec("sim-careless", kind="careless"))
LEVEL_OF = {grade_name(level): level for level in range(4)}


def make_project(handle: LabelStudioHandle, count: int, tag: str) -> tuple[int, dict[str, int]]:
    """A project of ``count`` tasks, one pair each; the pairs' true levels (the last pair's is unknown)."""
    project = int(handle.api("POST", "/api/projects", {"title": f"sim {tag}", "label_config": LABEL_CONFIG})["id"])
    tasks = [{"query": f"query {i // 5}", "doc_id": f"d-{i}", "document": f"Document {i}",
              "pair": pair_key(f"query {i // 5}", f"d-{i}")} for i in range(count)]
    handle.api("POST", f"/api/projects/{project}/import", tasks)
    truth = {t["pair"]: i % 4 for i, t in enumerate(tasks[:-1])}
    return project, truth


def open_ids(handle: LabelStudioHandle, project: int) -> set[int]:
    query = urllib.parse.quote(OPEN_FILTER)
    return {int(t["id"]) for t in handle.api("GET", f"/api/tasks?project={project}&page_size=1000&query={query}")
            ["tasks"]}


def run_until(pool: AnnotatorPool, done: Any, seconds: float = 60.0) -> None:
    """Run the pool until ``done()`` (checked twice a second) holds, then stop it and wait for it."""
    async def main() -> None:
        job = asyncio.create_task(pool.run())
        deadline = time.monotonic() + seconds
        while not await asyncio.to_thread(done):
            if job.done() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        pool.stop()
        await job
    asyncio.run(main())


def test_simulated_annotators_fill_each_task_to_its_overlap(label_studio: LabelStudioHandle) -> None:  # noqa: F811
    handle = label_studio
    tag = uuid.uuid4().hex[:8]
    users = asyncio.run(ensure_annotators(handle.url, handle.legacy_token, [s.name for s in SPECS]))
    assert asyncio.run(ensure_annotators(handle.url, handle.legacy_token, [s.name for s in SPECS])) == users
    assert len(set(users.values())) == 3
    annotators = [Annotator(spec, users[spec.name]) for spec in SPECS]
    project, truth = make_project(handle, 31, tag)
    tasks = sorted(handle.tasks(project), key=lambda t: t["id"])
    unknown = tasks[-1]["id"]
    doubled = [t["id"] for t in tasks[:24:3]]
    for k, task_id in enumerate(doubled):  # before any annotation: overlap alone, or with the flag
        handle.api("PATCH", f"/api/tasks/{task_id}", {"overlap": 2} if k % 2 else {"overlap": 2, "is_labeled": False})

    def level(data: Any) -> int | None:
        return truth.get(str(data.get("pair")))

    pool = AnnotatorPool(handle.url, handle.legacy_token, project, annotators, level, pace=25.0, seed=7,
                         seconds=60.0)
    run_until(pool, lambda: open_ids(handle, project) <= {unknown})
    assert not pool.errors
    assert open_ids(handle, project) == {unknown}, "every task with a known truth is labelled"
    assert unknown in pool.skipped_unknown

    by_id = {t["id"]: t for t in handle.tasks(project)}
    name_of = {uid: name for name, uid in users.items()}
    given = {g.annotation_id: g for g in pool.grades}
    assert len(given) == len(pool.grades) == 30 + len(doubled)
    for task_id, task in by_id.items():
        authors = [a["completed_by"] for a in task["annotations"]]
        expected = 0 if task_id == unknown else 2 if task_id in doubled else 1
        assert task["overlap"] == max(expected, 1)
        assert len(authors) == expected, (task_id, authors)
        assert len(set(authors)) == len(authors), f"task {task_id} annotated twice by one user: {authors}"
        for annotation in task["annotations"]:
            mine = given[annotation["id"]]
            assert mine.task_id == task_id and name_of[annotation["completed_by"]] == mine.annotator
            chosen = grade_of_choice(annotation["result"][0]["value"]["choices"][0])
            assert chosen is not None and LEVEL_OF[chosen] == mine.level
            if mine.annotator.startswith("sim-honest"):
                assert abs(mine.level - truth[task["data"]["pair"]]) <= 1, (mine, task["data"])
    careless = [g for g in pool.grades if g.annotator == "sim-careless"]
    assert careless and {g.annotator for g in pool.grades} == set(users)
    assert sum(g.level != truth[by_id[g.task_id]["data"]["pair"]] for g in careless) > 0

    # reopening for a third annotator: overlap alone leaves a labelled task labelled; with
    # is_labeled false it waits for a third user, whom a new pool (no memory of the first) picks
    third, untouched = doubled[:2], doubled[2]
    handle.api("PATCH", f"/api/tasks/{untouched}", {"overlap": 3})
    assert handle.api("GET", f"/api/tasks/{untouched}")["is_labeled"] is True
    for task_id in third:
        handle.api("PATCH", f"/api/tasks/{task_id}", {"overlap": 3, "is_labeled": False})
    assert open_ids(handle, project) == {unknown, *third}
    again = AnnotatorPool(handle.url, handle.legacy_token, project, annotators, level, pace=25.0, seed=8,
                          seconds=30.0)
    run_until(again, lambda: open_ids(handle, project) <= {unknown})
    assert not again.errors and sorted(g.task_id for g in again.grades) == sorted(third)
    by_id = {t["id"]: t for t in handle.tasks(project)}
    for task_id in third:
        task = by_id[task_id]
        authors = sorted(a["completed_by"] for a in task["annotations"])
        assert task["is_labeled"] is True and authors == sorted(users.values()), (task_id, authors)


def test_a_stopped_pool_submits_nothing_more(label_studio: LabelStudioHandle) -> None:  # noqa: F811
    handle = label_studio
    users = asyncio.run(ensure_annotators(handle.url, handle.legacy_token, [s.name for s in SPECS]))
    project, truth = make_project(handle, 40, uuid.uuid4().hex[:8])
    pool = AnnotatorPool(handle.url, handle.legacy_token, project,
                         [Annotator(spec, users[spec.name]) for spec in SPECS],
                         lambda data: truth.get(str(data.get("pair"))), pace=4.0, seed=1, seconds=60.0)
    started = time.monotonic()
    run_until(pool, lambda: time.monotonic() - started > 1.5)

    def stored() -> int:
        return sum(t["total_annotations"] for t in handle.tasks(project))
    after_stop = stored()
    assert 1 <= len(pool.grades) == after_stop < 39, "the pool worked, then stopped with work left"
    time.sleep(2.0)
    assert stored() == after_stop and len(pool.grades) == after_stop


def test_a_pool_ends_at_its_bounds(label_studio: LabelStudioHandle) -> None:  # noqa: F811
    handle = label_studio
    users = asyncio.run(ensure_annotators(handle.url, handle.legacy_token, [s.name for s in SPECS]))
    project, truth = make_project(handle, 20, uuid.uuid4().hex[:8])
    annotators = [Annotator(spec, users[spec.name]) for spec in SPECS]

    def level(data: Any) -> int | None:
        return truth.get(str(data.get("pair")))
    capped = AnnotatorPool(handle.url, handle.legacy_token, project, annotators, level, pace=50.0, max_grades=5)
    assert len(asyncio.run(capped.run())) == 5
    timed = AnnotatorPool(handle.url, handle.legacy_token, project, annotators, level, pace=1.0, seconds=2.0)
    started = time.monotonic()
    asyncio.run(timed.run())
    assert time.monotonic() - started < 6.0 and 1 <= len(timed.grades) <= 3
