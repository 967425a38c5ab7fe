"""Load helpers: producing a burst of events to Kafka and reading a process's resident memory."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaProducer

from monitor.core.stream.partition import partition_for
from monitor.sim.records import SimEvent


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def produce_burst(bootstrap: str, topics: dict[str, str], events: Sequence[SimEvent], rate: float,
                        partitions: int, step: float = 0.02) -> tuple[float, float]:
    """Produce ``events`` in order at ``rate`` messages/s, paced in ``step`` slices: each slice's
    messages go into one record batch per partition (Kafka's partitioner on the key, so order within a
    partition is the list's), sent without waiting; at the end every batch is awaited. Returns the
    start (first send) and the end (last acknowledgement), ``time.monotonic``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                max_batch_size=1024 * 1024, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        for topic in topics.values():  # metadata before the clock starts
            await producer.client._wait_on_metadata(topic)
        futures: list[asyncio.Future[object]] = []
        sent, n = 0, len(events)
        start = time.monotonic()
        while sent < n:
            due = min(n, math.ceil((time.monotonic() - start + step) * rate))
            batches: dict[tuple[str, int], object] = {}
            for event in events[sent:due]:
                tp = (topics[event.topic], partition_for(event.key, partitions))
                batch = batches.get(tp)
                if batch is None:
                    batch = batches[tp] = producer.create_batch()
                if batch.append(key=event.key, value=event.value, timestamp=None) is None:  # type: ignore[attr-defined]
                    futures.append(await producer.send_batch(batch, tp[0], partition=tp[1]))
                    batch = batches[tp] = producer.create_batch()
                    batch.append(key=event.key, value=event.value, timestamp=None)  # type: ignore[attr-defined]
            for (topic, partition), batch in batches.items():
                futures.append(await producer.send_batch(batch, topic, partition=partition))
            sent = due
            ahead = start + sent / rate - step - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        await asyncio.gather(*futures)
        return start, time.monotonic()
    finally:
        await producer.stop()
