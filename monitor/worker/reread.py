"""Reading Kafka again, beside Faust's consumer: a range of one partition, and a group's committed offsets.

When Redis has lost acknowledged writes (docs/worker.md, "Failure and recovery"), the worker applies the
lost messages again before going on. It reads them with a consumer of its own (no group, nothing
committed, Faust's position untouched), so the stream Faust delivers is not disturbed; and it asks the
group's committed offsets of partitions it has not had a message of yet, since everything before them
was applied in Redis once. Broker outages are waited out (retried with backoff), never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]
from aiokafka.errors import KafkaError  # type: ignore[import-untyped]

from monitor.worker.backoff import Backoff
from monitor.worker.processor import Consumed

log = logging.getLogger("monitor.worker")


async def fetch_range(bootstrap: str, options: Mapping[str, Any], topic: str, partition: int, start: int,
                      end: int, limit: int, retry_delay: float = 1.0, max_retry_delay: float = 30.0,
                      ) -> list[Consumed]:
    """Up to ``limit`` messages of ``topic[partition]`` with ``start <= offset < end``, in offset order
    (fewer only when the partition has no more below ``end``; messages removed by retention are gone)."""
    tp = TopicPartition(topic, partition)
    backoff = Backoff(retry_delay, max_retry_delay)
    while True:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", **options)
        try:
            await consumer.start()
            consumer.assign([tp])
            consumer.seek(tp, start)
            out: list[Consumed] = []
            while len(out) < limit and await consumer.position(tp) < end:
                fetched = await consumer.getmany(tp, timeout_ms=1000, max_records=limit - len(out))
                records = fetched.get(tp, [])
                out.extend(Consumed(topic, partition, r.offset, r.key, r.value or b"")
                           for r in records if start <= r.offset < end)
                if not records:
                    highwater = consumer.highwater(tp)
                    if highwater is not None and await consumer.position(tp) >= highwater:
                        break  # nothing more exists below end
            return out
        except KafkaError as error:
            log.warning("cannot read %s[%d] from Kafka again (%s); retrying in %.0f s", topic, partition,
                        type(error).__name__, backoff.delay)
        finally:
            await consumer.stop()
        await backoff.pause()


async def committed_offsets(bootstrap: str, options: Mapping[str, Any], group: str,
                            partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """The group's committed offset (the next one to read) of each (topic, partition), None if it has none.
    Raises :class:`KafkaError` when the broker does not answer (the caller tries again later)."""
    wanted = [TopicPartition(t, p) for t, p in partitions]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **options)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group, partitions=wanted)
    finally:
        await admin.close()
    out: dict[tuple[str, int], int | None] = {}
    for tp in wanted:
        meta = got.get(tp)
        out[(tp.topic, tp.partition)] = meta.offset if meta is not None and meta.offset >= 0 else None
    return out
