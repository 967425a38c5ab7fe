"""The in-process partitioner is Kafka's: Java's murmur2 test vectors and aiokafka's producer agree."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner

from monitor.core.stream.partition import murmur2, partition_for


@pytest.mark.parametrize(("text", "expected"), [
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    ("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829), ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
])
def test_java_murmur2_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def test_same_partition_as_the_aiokafka_producer() -> None:
    rng = random.Random(7)
    producer = DefaultPartitioner()
    for _ in range(3000):
        key = rng.randbytes(rng.randint(0, 40))
        partitions = rng.randint(1, 64)
        assert partition_for(key, partitions) == producer(key, list(range(partitions)), [])


def test_bad_partition_count() -> None:
    with pytest.raises(ValueError, match="partitions must be ≥ 1, got 0"):
        partition_for(b"k", 0)
