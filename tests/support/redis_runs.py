"""Feeding a stream through RedisState batch by batch, as the worker does."""

from __future__ import annotations

import json
import math
import random

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.transition import AnnotationRequest
from monitor.store.batch import Message
from monitor.store.memory import MemoryPipeline, partition_of
from monitor.store.writer import RedisState


async def run_through_redis(state: RedisState, events: list[tuple[str, bytes, bytes]], partitions: int,
                            redeliver: bool = False, batch: int = 1) -> list[AnnotationRequest]:
    """Feed ``events`` as the worker would; returns the annotation requests the messages produced."""
    requests: list[AnnotationRequest] = []
    offsets: dict[tuple[int, str], int] = {}
    delivered: list[tuple[int, str, int, bytes]] = []
    for topic, key, value in events:
        partition = partition_of(key, partitions)
        offset = offsets.get((partition, topic), -1) + 1
        offsets[(partition, topic)] = offset
        delivered.append((partition, topic, offset, value))
    rng = random.Random(batch)
    at = 0
    while at < len(delivered):  # batches of up to ``batch`` messages of one partition, as the worker takes them
        partition = delivered[at][0]
        size = rng.randint(1, batch)
        chunk = []
        while at < len(delivered) and len(chunk) < size and delivered[at][0] == partition:
            chunk.append(delivered[at])
            at += 1
        outcomes = await state.handle_batch(partition, [Message(t, o, v) for _, t, o, v in chunk])
        for outcome in outcomes:
            if outcome.transition is not None:
                requests.extend(outcome.transition.requests)
            for session_id, annotation in outcome.fan_out:  # the worker republishes these, keyed by session
                await state.apply_event(partition_of(session_id.encode(), partitions), annotation)
    if redeliver:  # a restart after a crash re-reads from the last commit: everything again
        for partition, topic, offset, value in delivered:
            assert (await state.handle(partition, topic, offset, value)).skipped
    await state.advance(math.inf)
    return requests


def with_query_labels(events: list[tuple[str, bytes, bytes]]) -> list[tuple[str, bytes, bytes]]:
    """Add query-level judgments for two queries (fanned out to their sessions in the join)."""
    out = list(events)
    for sid in ("s3", "s7"):
        grades = [{"doc_id": f"d{sid[1:]}-{j}", "grade": j % 4} for j in range(50)]
        out.append(("annotations", f"q-{sid}".encode(),
                    json.dumps({"type": "annotation", "query": f"q-{sid}", "grades": grades}).encode()))
    return out


def in_process(events: list[tuple[str, bytes, bytes]], config: StreamConfig, partitions: int,
               clock: float | None = None, **options: int) -> MemoryPipeline:
    """The in-process core fed ``events`` to the end (every due session closed): the reference; ``clock``:
    the wall clock of the clock rules (None: not checked, for streams on toy 1970 times)."""
    memory = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, clock=lambda: clock, **options)
    for topic, key, value in events:
        memory.submit(topic, key, value)
    memory.advance(math.inf)
    return memory
