"""The bridge's rater-quality counts in Redis: each task's contribution, replaced exactly, summed per hour.

* ``quality:counted``: task id → the counts the task added (``RaterTally.fields``) and the hour slice
  they went to;
* ``quality:<hour>``: the counts of the tasks first counted in that hour, summed by HINCRBY, kept the
  agreement window and two hours more.

A task's counts change with its annotations (a second or third grade, an edit, a deletion): each time the
difference between what it adds now and what it added before goes to its slice, in one transaction with
the new record, so a repeat (a webhook delivered twice, a walk after a webhook) adds nothing and a change
takes the old contribution back exactly. The slice is the hour of the task's latest grade when it is first
counted, and stays its slice after. The gauges read the slices of the window (:meth:`RaterCounts.window`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from monitor.annotate.ratings import LEVELS
from monitor.annotate.tasks import GradeGiven
from monitor.core.agreement.tally import RaterTally

#: seconds of a slice
SLICE = 3600
#: the bridge's key of a name in its project (``Bridge._key``)
KeyOf = Callable[[str], str]


class RaterCounts:
    """The counts of one bridge's project, in ``redis``, over windows of ``window`` seconds."""

    def __init__(self, redis: Any, window: float) -> None:
        self.redis = redis
        self.seconds = window

    async def replace(self, key: KeyOf, task_id: int, tally: RaterTally,
                      grades: Sequence[GradeGiven]) -> None:
        """Make ``tally`` the task's contribution (module docstring); nothing when it already is."""
        counted = key("quality:counted")
        held = await self.redis.hget(counted, str(task_id))
        record = json.loads(held) if held is not None else None
        new = tally.fields()
        old: dict[str, int] = record["f"] if record is not None else {}
        delta = {name: new.get(name, 0) - old.get(name, 0) for name in new.keys() | old.keys()}
        delta = {name: change for name, change in delta.items() if change}
        if not delta:
            return
        if record is not None:
            hour = int(record["s"])
        else:
            latest = max((g.ts for g in grades), default=time.time())
            hour = int(latest // SLICE * SLICE)
        slice_key = key(f"quality:{hour}")
        pipe = self.redis.pipeline(transaction=True)
        for name, change in sorted(delta.items()):
            pipe.hincrby(slice_key, name, change)
        pipe.expire(slice_key, int(self.seconds) + 2 * SLICE)
        pipe.hset(counted, str(task_id), json.dumps({"s": hour, "f": new}, separators=(",", ":")))
        await pipe.execute()

    async def window(self, key: KeyOf, now: float | None = None) -> RaterTally:
        """The counts of the hour slices that end after ``now − window`` (the current hour's included)."""
        hour = int((time.time() if now is None else now) // SLICE * SLICE)
        pipe = self.redis.pipeline(transaction=False)
        for i in range(int(self.seconds // SLICE)):
            pipe.hgetall(key(f"quality:{hour - SLICE * i}"))
        summed: dict[str, int] = {}
        for fields in await pipe.execute():
            for name, count in fields.items():
                text = name.decode() if isinstance(name, bytes) else str(name)
                summed[text] = summed.get(text, 0) + int(count)
        return RaterTally.from_fields(LEVELS, {name: n for name, n in summed.items() if n})
