"""Kafka, for real: 10,000 keyed messages through a 4-partition topic, back in order per partition."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.support.kafka_admin import create_topic

pytestmark = pytest.mark.integration

MESSAGES = 10_000
PARTITIONS = 4


async def test_keyed_messages_come_back_complete_and_in_order_per_partition(kafka_bootstrap: str) -> None:
    topic = f"services-roundtrip-{uuid.uuid4().hex[:8]}"
    await create_topic(kafka_bootstrap, topic, PARTITIONS)

    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    try:
        pending = [
            await producer.send(
                topic, key=f"query-{seq % 101}".encode(), value=json.dumps({"seq": seq}).encode()
            )
            for seq in range(MESSAGES)
        ]
        acks = await asyncio.gather(*pending)
    finally:
        await producer.stop()

    produced: dict[int, list[tuple[int, bytes, int]]] = defaultdict(list)
    for seq, ack in enumerate(acks):
        produced[ack.partition].append((ack.offset, f"query-{seq % 101}".encode(), seq))

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    consumed: dict[int, list[tuple[int, bytes, int]]] = defaultdict(list)
    try:
        async with asyncio.timeout(60):
            while sum(map(len, consumed.values())) < MESSAGES:
                batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
                for partition, records in batches.items():
                    consumed[partition.partition].extend(
                        (record.offset, record.key, json.loads(record.value)["seq"]) for record in records
                    )
    finally:
        await consumer.stop()

    assert sum(map(len, consumed.values())) == MESSAGES
    assert sorted(consumed) == list(range(PARTITIONS)), "every partition should hold some keys"
    for partition, records in consumed.items():
        assert records == sorted(produced[partition]), f"partition {partition} differs from what was acked"
        sequence = [seq for _, _, seq in records]
        assert sequence == sorted(sequence), f"partition {partition} is out of production order"
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    for partition, records in consumed.items():
        for _, key, _ in records:
            partitions_of_key[key].add(partition)
    assert all(len(found) == 1 for found in partitions_of_key.values()), "a key landed on two partitions"
