"""The engine of ``monitor demo`` and ``monitor replay``: the stream core, sampled on an event-time grid.

Raw events go into :class:`~monitor.store.memory.MemoryPipeline` exactly as the worker's consumer hands
them over (topic, key, value bytes). Whenever the watermark (largest impression time) enters a new cell of
the ``sample_every`` grid, the engine takes a snapshot (what ``/metrics`` serves), asks the canary judge
for its verdicts on the pipeline's history, collects the alert notifications it gives, and records a
point. Because sampling follows event time, not the wall clock, a paced demo, a fast one and a replay of
the same stream record the same points and fire the same alerts at the same event times.

No clock here: callers pass the wall offset, which is only recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE, Scale
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.snapshot import Snapshot
from monitor.core.stream.stats import Stats
from monitor.demo.recording import Point, Recording
from monitor.demo.settings import SAMPLE_EVERY
from monitor.demo.verdict_rows import AlertNote, Judge, VerdictRow
from monitor.store.memory import MemoryPipeline


def deploy_json(deploy: Deploy) -> dict[str, object]:
    """A deploy as a run file records it (``share`` only when declared)."""
    out: dict[str, object] = {"kind": deploy.kind, "ranker": deploy.ranker, "previous": deploy.previous,
                              "ts": deploy.ts}
    if deploy.share is not None:
        out["share"] = deploy.share
    return out


class Engine:
    """One pipeline, its judge and its recording."""

    def __init__(self, judge: Judge, config: StreamConfig, source: Mapping[str, object],
                 scale: Scale = FOUR_LEVEL_SCALE, sample_every: float = SAMPLE_EVERY,
                 partitions: int = 1) -> None:
        """``partitions``: how many partitions the pipeline routes events to, by key as Kafka's
        partitioner does (the worker's topics' count gives the worker's numbers)."""
        if not (math.isfinite(sample_every) and sample_every > 0):
            raise ValueError(f"sample_every must be a positive number of seconds, got {sample_every!r}")
        self.judge, self.sample_every = judge, sample_every
        # keep: bounded for --forever
        self.pipeline = MemoryPipeline(config, scale, partitions=partitions, keep=10_000)
        self.recording = Recording(dict(source), dict(config.k), dict(config.windows))
        self.latest: Snapshot = self.pipeline.snapshot()
        self.verdicts: list[VerdictRow] = []
        self.firing: dict[tuple[str, ...], AlertNote] = {}
        self.events = 0
        self.first_watermark: float | None = None
        self._cell: int | None = None

    def feed(self, topic: str, key: bytes | None, value: bytes, wall: float) -> list[AlertNote]:
        """Submit one raw event; at a new grid cell of the watermark, sample (returns the notifications)."""
        self.pipeline.submit(topic, key, value)
        self.events += 1
        watermark = self.pipeline.watermark
        if not math.isfinite(watermark):
            return []
        cell = math.floor(watermark / self.sample_every)
        if self._cell is None:
            self._cell, self.first_watermark = cell, watermark
        if cell <= self._cell:
            return []
        self._cell = cell
        return self.sample(wall)

    def sample(self, wall: float) -> list[AlertNote]:
        """Snapshot, verdicts, alerts and one recorded point, at the current watermark."""
        snapshot = self.pipeline.snapshot()
        self.latest = snapshot
        if not math.isfinite(snapshot.watermark):
            return []
        deploys = [d for d in self.pipeline.deploys if isinstance(d, Deploy)]
        self.verdicts, notes = self.judge.update(self.pipeline.history(), deploys, snapshot.watermark, wall)
        for note in notes:
            if note.status == "firing":
                self.firing[note.key] = note
            else:
                self.firing.pop(note.key, None)
        windows: dict[str, dict[str, Stats]] = {}
        for (window, group), stats in sorted(snapshot.windows.items()):
            windows.setdefault(window, {})[group] = Stats(stats)
        self.recording.points.append(Point(snapshot.watermark, wall, windows,
                                           [row.to_json() for row in self.verdicts]))
        self.recording.deploys = [deploy_json(d) for d in deploys]
        self.recording.alerts.extend(note.to_json() for note in notes if not note.update)
        return notes

    def finish(self, wall: float, flush: bool = True) -> list[AlertNote]:
        """End of input: close every session still in the join (``flush``) and take a last sample."""
        if flush:
            self.pipeline.advance(math.inf)
        return self.sample(wall)
