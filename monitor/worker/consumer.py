"""The worker's consumer: batches straight from aiokafka, in the consumer group, inside the Faust app.

Faust's own consumer hands every message on by itself: from its consumer thread through the conductor, a
channel and the stream iterator to the agent, with an ack and sensor calls each. With nothing else to do,
an agent that takes batches of 500 drains about 3,600 realistic messages a second on the 2-core machine
(about 10,400 with larger fetches), where aiokafka alone reads about 50,000 (``benchmarks/stream.py``,
"Faust's ceiling"): that per-event path, not the monitor, bounded the worker. So the worker switches
Faust's consumer off (:class:`NoConsumer`) and this service, started with the app, reads batches itself:
``getmany`` of up to ``batch_size`` messages within ``batch_wait``, in the consumer group
``MONITOR_APP_ID`` (aiokafka's group membership, heartbeats and rebalances), with the range assignor, so
that a worker holds the same partition numbers of the impression, annotation and deploy topics
(co-partitioned topics: a session's impression and its labels meet in one worker).

Per batch: :meth:`~monitor.worker.processor.Processor.handle_batch` (each partition's part committed to
Redis atomically with its offsets and outbox), the outbox produced and acknowledged, then the offsets
committed to Kafka (at most every ``COMMIT_EVERY`` seconds, and whenever the topics are drained): Kafka's
committed offsets only decide where a restart resumes; what Redis applied is the truth (docs/worker.md,
"Failure and recovery"). A rebalance waits for the batch in hand, commits what was applied, and makes the
processor forget what it knew of the partitions.

A partition's impressions are kept in step with its annotations (:func:`impressions_ready`): an impression
waits until the annotations of its partition were read up to its record's timestamp, or to their end, as
Kafka Streams keeps co-partitioned inputs in step by timestamp. The join closes a session when its
partition's watermark passes the session's deadline; labels read later re-score it (the join is
confluent), but meanwhile it counts as expired or scored on its query's shared grades alone. A consumer
that ran ahead on a partition's impressions while its annotations lagged (a backlog, a busy machine,
fetches of very different sizes) showed every reader a biased sample at the live edge: a deploy's
candidate is all edge and its baseline a day old and settled, so an unchanged ranker could look worse
for a moment, and alert. Impressions that must wait are sought back and their partition paused until the
labels catch up; a partition that waited ``LABELS_WAIT`` seconds goes on as before until its labels are
all read (a producer whose clock runs ahead must not stall it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]
from aiokafka.abc import ConsumerRebalanceListener  # type: ignore[import-untyped]
from aiokafka.coordinator.assignors.range import RangePartitionAssignor  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError  # type: ignore[import-untyped]
from faust.app.base import BootStrategy

from monitor.worker.backoff import Backoff
from monitor.worker.outbox import Entry
from monitor.worker.processor import Consumed, Processor
from monitor.worker.settings import WorkerSettings

log = logging.getLogger("monitor.worker")
COMMIT_EVERY = 1.0
"""Seconds between Kafka offset commits while batches keep coming (at once when the topics are drained)."""
MAX_POLL_INTERVAL_MS = 30 * 60 * 1000
"""A batch may wait out a Redis or Kafka outage this long before the group gives its partitions away."""


FETCH_MAX_WAIT_MS = 100
"""How long the broker may hold a fetch that finds no new message (Kafka's default: 500 ms). aiokafka sends
one fetch at a time to a broker, for the partitions it has nothing buffered of: a fetch that asked only for
quiet partitions (the deploys topic, a partition just emptied) held the next fetch of a busy one back for
up to this long, which was the tail of the label-to-counted latency (p90 0.72 s, p99 0.98 s at half the
drain rate with 500 ms; benchmarks/stream.py part 2)."""


def fetch_bytes(batch_size: int) -> int:
    """How much one fetch may bring of a partition: room for a batch of ``batch_size`` messages of about
    2 KiB (at least aiokafka's 1 MiB), so that a batch is mostly a few partitions' long runs rather than
    many short ones: a partition's part of a batch costs Redis a few round trips and one commit whatever its
    length (realistic mix, 4 partitions: 11.3 -> 8.4-9.9 µs of Redis CPU per message from 500 to 2,000)."""
    return max(1 << 20, batch_size * 2048)


def fetch_total_bytes(batch_size: int) -> int:
    """How much one fetch may bring of all partitions together: four partitions' worth. aiokafka keeps what
    a fetch brought until it is consumed, so this bounds the worker's buffered messages whatever the
    number of partitions it holds (with Kafka's default, 50 MiB, a worker holding a dozen partitions
    could keep 4 MiB of each waiting)."""
    return 4 * fetch_bytes(batch_size)


LABELS_WAIT = 30.0
"""The longest an impression partition waits for its annotations to be read up to its time (seconds)."""


def impressions_ready(impressions: Sequence[Any], labels_read_to: float | None) -> int:
    """How many of ``impressions`` (one partition's fetched records, in offset order) may be applied now:
    those whose record timestamp is at most ``labels_read_to``, the timestamp up to which the annotations
    of the same partition were read (None: all of them were, nothing to wait for). Module docstring.

    >>> from types import SimpleNamespace as R
    >>> impressions_ready([R(timestamp=100), R(timestamp=200), R(timestamp=300)], 250.0)
    2
    """
    if labels_read_to is None:
        return len(impressions)
    ready = 0
    for record in impressions:
        if record.timestamp > labels_read_to:
            break
        ready += 1
    return ready


class NoConsumer(BootStrategy):
    """Faust's boot strategy without Faust's consumer (nor its conductor and tables): the app starts the
    producer, the sensors, the tasks and :class:`BatchConsumer`, and joins no consumer group itself."""

    enable_kafka_consumer = False


class BatchConsumer(ConsumerRebalanceListener):  # type: ignore[misc]
    """The consume loop and its rebalance listener (:meth:`run` is the app's task)."""

    def __init__(self, settings: WorkerSettings, processor: Processor,
                 send: Callable[[Sequence[Entry]], Awaitable[None]]) -> None:
        self.settings, self.processor, self.send = settings, processor, send
        self.sources = sorted(settings.topics.sources())
        self.consumer: AIOKafkaConsumer | None = None  # made in run(): aiokafka wants the running loop
        self.assignments = 0       # completed assignments (rebalances), for readiness
        self.rebalancing = False   # between a revocation and the next assignment
        self._batch = asyncio.Lock()  # held while a batch is handled: a revocation waits for it
        self._uncommitted: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self._committed_at = time.monotonic()
        self._labels_read_to: dict[int, float] = {}  # partition → timestamp of the last annotation read
        self._labels_next: dict[int, int] = {}  # partition → the offset after the last annotation read
        self._waiting: dict[TopicPartition, tuple[float, float]] = {}  # paused impressions: (timestamp of
        # the first held record, when the wait began)
        self._released: set[TopicPartition] = set()  # waited LABELS_WAIT: not held until labels drain
        self.label_waits = 0  # how often a partition's impressions waited for its labels

    # -- the group ----------------------------------------------------------------------------------
    def consuming(self) -> bool:
        """Joined the consumer group (an assignment done) and not rebalancing now."""
        return self.assignments > 0 and not self.rebalancing

    def assignment(self) -> set[tuple[str, int]]:
        """The (topic, partition) pairs this worker holds now."""
        held = self.consumer.assignment() if self.consumer is not None else ()
        return {(tp.topic, tp.partition) for tp in held}

    def highwater(self, topic: str, partition: int) -> int | None:
        """The partition's end offset as of the last fetch (None before one)."""
        end = None if self.consumer is None else self.consumer.highwater(TopicPartition(topic, partition))
        return None if end is None else int(end)

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        """Before a rebalance: finish the batch in hand, commit what was applied, forget the partitions."""
        self.rebalancing = True
        async with self._batch:
            await self._commit(force=True)
            self.processor.forget((tp.topic, tp.partition) for tp in revoked)
            self._forget_labels()

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """After a rebalance: another worker may have written these partitions meanwhile."""
        held = [(tp.topic, tp.partition) for tp in assigned]
        self.processor.forget(held)
        self._uncommitted.clear()
        self._forget_labels()
        self.assignments += 1
        self.rebalancing = False
        log.info("assigned %d partitions: %s", len(held), sorted(held))

    # -- the loop -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Consume until cancelled (the app stops): batches in, state and outbox out, offsets committed."""
        settings = self.settings
        fetched_bytes = fetch_bytes(settings.batch_size)
        consumer = self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap, group_id=settings.app_id,
            group_instance_id=settings.group_instance_id, enable_auto_commit=False,
            auto_offset_reset="earliest", partition_assignment_strategy=(RangePartitionAssignor,),
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS, max_partition_fetch_bytes=fetched_bytes,
            fetch_max_bytes=fetch_total_bytes(settings.batch_size), fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            **settings.kafka_security().aiokafka_options())
        consumer.subscribe(self.sources, listener=self)
        backoff = Backoff(1.0, 30.0)
        while True:
            try:
                await consumer.start()
                break
            except KafkaError as error:  # the brokers are not reachable yet: wait, as the producer does
                log.warning("cannot join the consumer group (%s: %s); retrying in %.0f s",
                            type(error).__name__, error, backoff.delay)
                await backoff.pause()
        try:
            while True:
                fetched = await consumer.getmany(timeout_ms=int(settings.batch_wait * 1000),
                                                 max_records=settings.batch_size)
                await self._resume(consumer, fetched)
                if not fetched:
                    await self._commit(force=True)  # drained: what was applied is committed now
                    continue
                async with self._batch:
                    await self._handle(consumer, fetched)
        finally:
            try:
                await self._commit(force=True)
            finally:
                await consumer.stop()

    # -- impressions in step with their labels (module docstring) ------------------------------------
    def _forget_labels(self) -> None:
        """After a rebalance: positions are those the group resumes at; nothing waits (a new assignment
        starts unpaused)."""
        self._labels_read_to.clear()
        self._labels_next.clear()
        self._waiting.clear()
        self._released.clear()

    async def _labels_read_to_now(self, consumer: AIOKafkaConsumer, partition: int) -> float | None:
        """The timestamp up to which the partition's annotations were read; None when they were all read
        (or the worker does not hold them: nothing to wait for)."""
        labels = TopicPartition(self.settings.topics.annotations, partition)
        if labels not in consumer.assignment():
            return None
        end = consumer.highwater(labels)
        position: int | None = self._labels_next.get(partition)
        if position is None:
            try:
                position = int(await consumer.position(labels))
            except (IllegalStateError, KafkaError):  # not known now: the labels wait to be read
                position = None
        if end is not None and position is not None and position >= end:
            return None
        return self._labels_read_to.get(partition, -math.inf)

    async def _resume(self, consumer: AIOKafkaConsumer, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Note how far each partition's annotations were read in ``fetched``, resume the impression
        partitions whose labels caught up (or that waited ``LABELS_WAIT``), then hold back, in place, the
        impressions of ``fetched`` that must wait: sought back to the first held record and paused."""
        roles = self.settings.topics
        for tp, records in fetched.items():
            if tp.topic == roles.annotations and records:
                self._labels_read_to[tp.partition] = max(self._labels_read_to.get(tp.partition, -math.inf),
                                                         float(records[-1].timestamp))
                self._labels_next[tp.partition] = records[-1].offset + 1
        now = time.monotonic()
        held = consumer.assignment()
        for tp, (first, since) in list(self._waiting.items()):
            read_to = await self._labels_read_to_now(consumer, tp.partition)
            if tp not in held or read_to is None or read_to >= first or now - since >= LABELS_WAIT:
                del self._waiting[tp]
                if tp in held:  # (revoked meanwhile: IllegalStateError; a new assignment starts unpaused)
                    with contextlib.suppress(IllegalStateError):
                        consumer.resume(tp)
                if read_to is not None and read_to < first and tp in held:
                    self._released.add(tp)
                    log.warning("%s[%d]: impressions waited %.0f s for their partition's annotations to be "
                                "read up to their time; going on without waiting until those are all read",
                                tp.topic, tp.partition, now - since)
        for tp, records in list(fetched.items()):
            if tp.topic != roles.impressions or not records or tp not in held:
                continue
            read_to = await self._labels_read_to_now(consumer, tp.partition)
            if tp in self._released:
                if read_to is not None:
                    continue
                self._released.discard(tp)
            ready = impressions_ready(records, read_to)
            if ready == len(records):
                continue
            try:
                consumer.seek(tp, records[ready].offset)
                consumer.pause(tp)
            except IllegalStateError:  # revoked by a rebalance during an await above: not ours to hold
                del fetched[tp]  # (nor to apply: _handle keeps only what the consumer still holds)
                continue
            self._waiting[tp] = (float(records[ready].timestamp), now)
            self.label_waits += 1
            if ready:
                fetched[tp] = records[:ready]
            else:
                del fetched[tp]

    async def _handle(self, consumer: AIOKafkaConsumer, fetched: dict[TopicPartition, list[Any]]) -> None:
        held = consumer.assignment()
        batch = [Consumed(tp.topic, tp.partition, r.offset, r.key, r.value or b"")  # a tombstone: b""
                 for tp, records in fetched.items() if tp in held for r in records]
        if not batch:
            return
        await self.processor.handle_batch(batch)
        await self.processor.drain(sorted({c.partition for c in batch}), self.send)
        for tp, records in fetched.items():
            if tp in held and records:
                self._uncommitted[tp] = records[-1].offset + 1
        await self._commit()

    async def _commit(self, force: bool = False) -> None:
        """Commit the applied offsets to Kafka (where a restart resumes), every ``COMMIT_EVERY`` seconds
        unless ``force``; a commit refused by a rebalance is harmless (Redis's offsets are the truth)."""
        if self.consumer is None or not self._uncommitted or (
                not force and time.monotonic() - self._committed_at < COMMIT_EVERY):
            return
        held = self.consumer.assignment()
        offsets = {tp: offset for tp, offset in self._uncommitted.items() if tp in held}
        self._uncommitted.clear()
        self._committed_at = time.monotonic()
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError, KafkaError) as error:
            log.warning("offsets not committed to Kafka (%s: %s); a restart reads those messages again and "
                        "skips what Redis applied", type(error).__name__, error)
