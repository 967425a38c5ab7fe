"""A partition's impressions wait for its annotations read up to their time (monitor/worker/consumer.py):
a session must not be closed before the labels produced with it were read, or every reader sees the
newest sessions scored on partial labels or expired (a false regression of a deploy, in CI once)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition  # type: ignore[import-untyped]

from monitor.worker import consumer as module
from monitor.worker.consumer import BatchConsumer, impressions_ready
from monitor.worker.settings import WorkerSettings

TOPICS = WorkerSettings().topics
IMP0, ANN0 = TopicPartition(TOPICS.impressions, 0), TopicPartition(TOPICS.annotations, 0)
IMP1, ANN1 = TopicPartition(TOPICS.impressions, 1), TopicPartition(TOPICS.annotations, 1)


@dataclass
class Record:
    offset: int
    timestamp: int


def records(first: int, stamps: list[int]) -> list[Record]:
    return [Record(first + i, t) for i, t in enumerate(stamps)]


class Consumer:
    """What the alignment uses of aiokafka's consumer: assignment, highwater, position, seek, pause,
    resume (the real one is exercised by every worker integration test)."""

    def __init__(self, held: set[TopicPartition], ends: dict[TopicPartition, int],
                 positions: dict[TopicPartition, int]) -> None:
        self.held, self.ends, self.positions = held, ends, positions
        self.sought: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return self.held

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.ends.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.sought[tp] = offset

    def pause(self, tp: TopicPartition) -> None:
        self.paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self.paused.discard(tp)


def align(batch: BatchConsumer, consumer: Consumer, fetched: dict[TopicPartition, list[Any]]
          ) -> dict[TopicPartition, list[Any]]:
    asyncio.run(batch._resume(consumer, fetched))
    return fetched


class Processor:
    def forget(self, held: Any) -> None:
        self.forgot = list(held)


def new_batch() -> BatchConsumer:
    return BatchConsumer(WorkerSettings(), processor=Processor(), send=None)  # type: ignore[arg-type]


def test_impressions_are_ready_up_to_the_time_their_labels_were_read() -> None:
    got = records(10, [100, 200, 300, 400])
    assert [impressions_ready(got, t) for t in (250.0, 400.0, 50.0, None)] == [2, 4, 0, 4]


def test_impressions_ahead_of_their_labels_are_held_back_sought_back_and_paused() -> None:
    consumer = Consumer({IMP0, ANN0, IMP1, ANN1}, {ANN0: 100, ANN1: 7}, {ANN1: 7})
    labels = records(50, [5, 15, 25])
    fetched = {IMP0: records(0, [10, 20, 30, 40]), ANN0: labels, IMP1: records(0, [10, 20])}
    batch = new_batch()
    out = align(batch, consumer, fetched)
    assert [r.offset for r in out[IMP0]] == [0, 1]  # the labels read reach 25: 30 and 40 wait
    assert consumer.sought == {IMP0: 2} and consumer.paused == {IMP0}
    assert out[ANN0] == labels  # labels never wait (early labels wait in the join)
    assert [r.offset for r in out[IMP1]] == [0, 1]  # partition 1's labels are all read (position 7 = end 7)
    assert batch.label_waits == 1
    # the next fetch brings labels up to 35: partition 0's impressions go on from offset 2
    align(batch, consumer, {ANN0: records(53, [35])})
    assert consumer.paused == set()


def test_impressions_wait_while_their_labels_are_unread_and_an_empty_label_topic_holds_nothing() -> None:
    consumer = Consumer({IMP0, ANN0}, {ANN0: 3}, {ANN0: 0})
    batch = new_batch()
    assert IMP0 not in align(batch, consumer, {IMP0: records(5, [10, 20])})
    assert consumer.sought == {IMP0: 5} and consumer.paused == {IMP0}
    consumer.positions[ANN0] = 3  # read to the end (an empty fetch): the wait ends
    align(batch, consumer, {})
    assert consumer.paused == set()
    empty = Consumer({IMP0, ANN0}, {ANN0: 0}, {ANN0: 0})
    assert [r.offset for r in align(new_batch(), empty, {IMP0: records(5, [10, 20])})[IMP0]] == [5, 6]


def test_a_partition_that_waited_too_long_goes_on_until_its_labels_are_all_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer whose clock runs ahead stamps impressions its labels never reach: after LABELS_WAIT the
    partition goes on as before, and waits again only once its labels were all read."""
    monkeypatch.setattr(module, "LABELS_WAIT", 0.0)
    consumer = Consumer({IMP0, ANN0}, {ANN0: 10}, {ANN0: 0})
    batch = new_batch()
    align(batch, consumer, {IMP0: records(0, [10_000])})
    assert consumer.paused == {IMP0}
    align(batch, consumer, {})  # waited LABELS_WAIT (0 here): resumed and released
    assert consumer.paused == set()
    assert [r.offset for r in align(batch, consumer, {IMP0: records(0, [10_000, 20_000])})[IMP0]] == [0, 1]
    consumer.positions[ANN0] = 10  # all read: the next impressions ahead of new labels wait again
    align(batch, consumer, {IMP0: records(2, [30_000])})
    consumer.ends[ANN0] = 12
    assert IMP0 not in align(batch, consumer, {IMP0: records(3, [40_000])}) and consumer.paused == {IMP0}


def test_a_rebalance_forgets_what_was_read_and_what_waited() -> None:
    consumer = Consumer({IMP0, ANN0}, {ANN0: 3}, {ANN0: 0})
    batch = new_batch()
    align(batch, consumer, {IMP0: records(5, [10]), ANN0: records(0, [1])})
    assert batch._waiting and batch._labels_read_to
    asyncio.run(batch.on_partitions_assigned([]))
    assert not batch._waiting and not batch._labels_read_to and not batch._labels_next


def test_a_partition_revoked_during_the_check_is_neither_held_nor_applied() -> None:
    """A rebalance may revoke a partition while the check awaits aiokafka: seeking or pausing it then raises
    IllegalStateError; its records are dropped (the next owner reads them) and the loop goes on."""
    from aiokafka.errors import IllegalStateError  # type: ignore[import-untyped]

    class Revoked(Consumer):
        def seek(self, tp: TopicPartition, offset: int) -> None:
            raise IllegalStateError(f"No current assignment for partition {tp}")

    consumer = Revoked({IMP0, ANN0}, {ANN0: 3}, {ANN0: 0})
    batch = new_batch()
    out = align(batch, consumer, {IMP0: records(5, [10, 20]), ANN0: records(0, [1])})
    assert IMP0 not in out and not batch._waiting and consumer.paused == set()
