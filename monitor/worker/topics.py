"""Create the worker's topics before anything consumes or produces them, and check co-partitioning.

A broker with ``auto.create.topics.enable`` would otherwise create a topic with its default partition
count at the first produce, and a consumer subscribed to a missing topic waits for it silently. The join
needs the three source topics to have the same partition count (a session's impression and annotations
must meet on one partition number), so a mismatch stops the start with a clear error.

Topics are created with ``MONITOR_REPLICATION_FACTOR`` replicas and a ``min.insync.replicas`` that fits it
(:func:`min_insync`): with 3 or more replicas an ``acks=all`` write (the worker's producer and ``monitor
produce`` use ``acks=all``) is on 2 brokers before it is acknowledged, and one broker may be down without
stopping writes; below 3, 1 (a broker default of 2 would make every write to a topic with fewer replicas
fail). Topics that exist are left as they are.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from monitor.worker.security import KafkaSecurity
from monitor.worker.settings import SettingsError, Topics

log = logging.getLogger("monitor.worker")


def min_insync(replication: int) -> int:
    """``min.insync.replicas`` of the topics created with ``replication`` replicas: 2 from 3 replicas up,
    else 1."""
    return 2 if replication >= 3 else 1


async def _describe(admin: Any, names: list[str]) -> dict[str, int]:
    """Topic → partition count, for the topics that exist (listed first: a metadata request for a
    missing topic would make a broker with auto-creation create it with its default partition count)."""
    listed = set(await admin.list_topics())
    present = [n for n in names if n in listed]
    if not present:
        return {}
    found: dict[str, int] = {}
    for meta in await admin.describe_topics(present):
        if meta.get("error_code", 0) == 0 and meta.get("partitions"):
            found[meta["topic"]] = len(meta["partitions"])
    return found


async def ensure_topics(bootstrap: str, topics: Topics, partitions: int, replication: int = 1,
                        timeout: float = 60.0, security: KafkaSecurity | None = None) -> int:
    """Create missing topics with ``partitions``; return the source topics' common partition count.

    ``security``: how to connect (SASL, TLS; default plaintext). A refused login or certificate looks
    like a broker that does not answer yet to aiokafka (it logs the reason at each try), so it is waited
    for like one, and the final error names the protocol to check."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
    from aiokafka.errors import TopicAlreadyExistsError  # type: ignore[import-untyped]

    names = [topics.impressions, topics.annotations, topics.deploys, topics.dead_letters, topics.requests]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000),
                                **(security or KafkaSecurity()).aiokafka_options())
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await admin.start()
            break
        except Exception as error:  # the broker is not up yet: wait for it, as the worker would
            if asyncio.get_running_loop().time() > deadline:
                protocol = (security or KafkaSecurity()).protocol
                hint = "" if protocol == "PLAINTEXT" else (f"; or it refused this client's {protocol} "
                                                           "login or certificate (the log says which)")
                raise SettingsError(f"MONITOR_KAFKA_BOOTSTRAP: no broker answers at {bootstrap} "
                                    f"({type(error).__name__}){hint}") from None
            log.warning("waiting for Kafka at %s (%s)", bootstrap, type(error).__name__)
            await asyncio.sleep(1.0)
    try:
        existing = await _describe(admin, names)
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                configs = {"min.insync.replicas": str(min_insync(replication))}
                await admin.create_topics([NewTopic(n, partitions, replication, topic_configs=configs)
                                           for n in missing])
                log.info("created topics %s with %d partitions, %d replicas, min.insync.replicas %s", missing,
                         partitions, replication, configs["min.insync.replicas"])
            except TopicAlreadyExistsError:
                pass
            for _ in range(100):
                existing = await _describe(admin, names)
                if all(n in existing for n in names):
                    break
                await asyncio.sleep(0.1)
        counts = {n: existing.get(n, partitions) for n in names[:3]}
        if len(set(counts.values())) != 1:
            raise SettingsError(f"topics: the source topics must have one partition count (a session's "
                                f"impression and annotations meet on one partition); found {counts}")
        actual = next(iter(counts.values()))
        if actual != partitions:
            log.warning("topics have %d partitions, not MONITOR_PARTITIONS=%d: using %d", actual, partitions,
                        actual)
        return actual
    finally:
        await admin.close()
