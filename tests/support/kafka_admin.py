"""Helpers for the integration tests that talk to the real Kafka."""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create ``name`` with ``partitions`` partitions (replication factor 1: one broker)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        await admin.close()


async def partition_layout(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """Each partition of ``topic`` as (leader, replicas, in-sync replicas), from the cluster's metadata; a
    broker whose metadata lacks a topic just created answers with no partitions (CI saw it once on the
    three-broker cluster), so it is asked again for up to 30 s."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    deadline = time.monotonic() + 30.0
    try:
        while True:
            [described] = await admin.describe_topics([topic])
            if described["partitions"] or time.monotonic() > deadline:
                return {p["partition"]: (p["leader"], sorted(p["replicas"]), sorted(p["isr"]))
                        for p in described["partitions"]}
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """The configuration of ``topic`` as the brokers report it (explicit and default values); a broker that
    does not know a topic just created yet answers with an error, so it is asked again for up to 30 s."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    deadline = time.monotonic() + 30.0
    try:
        while True:
            [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            [(error, message, _type, _name, entries)] = response.resources
            if error == 0:
                return {entry[0]: entry[1] for entry in entries}
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: describe_configs answers error {error} ({message})")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
