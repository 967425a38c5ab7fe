"""The bridge's Label Studio client against a real Label Studio: the walk since a checkpoint.

Label Studio updates a task's ``updated_at`` when one of its annotations is saved or deleted; the
client's ``tasks(project, since=...)`` filters on it through the data manager, and ``server_time()``
reads Label Studio's clock. Three tasks, a checkpoint, one annotated: the walk since the checkpoint
lists only that one (the reconciliation after a restart reads what changed, not the whole project).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from monitor.annotate.client import LabelStudio
from monitor.annotate.tasks import LABEL_CONFIG, Document, task_data
from tests.fixtures.label_studio import LabelStudioHandle, label_studio  # noqa: F401 (fixture)
from tests.support.annotate import grade

pytestmark = pytest.mark.integration


async def walk(handle: LabelStudioHandle) -> tuple[set[int], set[int], set[int], int]:
    async with LabelStudio(handle.url, handle.access_token) as ls:
        project = await ls.find_or_create_project(f"checkpoint {uuid.uuid4().hex[:6]}", LABEL_CONFIG)
        request = {"query": "耳机", "query_bucket": "head"}
        tasks = [await ls.create_task(project, task_data(request, f"d-{i}", Document(), ["s-1"])) for i in range(3)]
        await asyncio.sleep(2.5)  # past the creations, in Label Studio's whole seconds
        checkpoint = await ls.server_time() - timedelta(seconds=1)
        await asyncio.sleep(1.5)
        await asyncio.to_thread(grade, handle, tasks[1], "高")
        since = {int(t["id"]) async for t in ls.tasks(project, since=checkpoint)}
        everything = {int(t["id"]) async for t in ls.tasks(project)}
        later = {int(t["id"]) async for t in ls.tasks(project, since=checkpoint + timedelta(hours=1))}
        return since, everything, later, tasks[1]


def test_the_walk_since_a_checkpoint_lists_only_the_tasks_updated_since(
        label_studio: LabelStudioHandle) -> None:  # noqa: F811 (the fixture)
    since, everything, later, annotated = asyncio.run(walk(label_studio))
    assert len(everything) == 3
    assert since == {annotated}
    assert later == set()
