"""Kafka's default partitioner, so the in-process pipeline routes keys exactly as a Kafka producer does.

Java's ``Utils.murmur2`` (seed 0x9747b28c) of the key bytes, made positive with ``& 0x7fffffff``, modulo
the partition count: the partition a keyed message lands on with the Java client, librdkafka's
``murmur2_random`` and aiokafka's ``DefaultPartitioner``. With it, per-partition state in process (sketch,
budget, watermark) is the state the Kafka worker keeps for the same stream.

>>> murmur2(b"21")
-973932308
>>> partition_for(b"session-1", 4)
0
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 as Kafka's Java client computes it (a signed 32-bit result)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail >= 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition of a keyed message (a message without a key goes to partition 0 here)."""
    if partitions < 1:
        raise ValueError(f"partitions must be ≥ 1, got {partitions}")
    if key is None:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % partitions
