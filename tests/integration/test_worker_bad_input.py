"""Bad input on real Kafka and Redis: over 10,000 malformed events mixed into a valid stream, one worker.

The valid stream is the simulator's (3,000 sessions: late, early, corrected, query-level and missing
labels, deploys; no invalid events of its own). The corpus (monitor/sim/corpus.py) adds at least 10,000
malformed events, every kind in equal numbers, at random places of the impressions, annotations and
deploys topics: bytes (truncated, not JSON, not UTF-8, UTF-16, overlong UTF-8, a BOM, unpaired surrogate
escapes, NaN/Infinity tokens, deep nesting), values that are not one object, wrong types, missing fields,
non-finite and overflowing numbers, negative/zero/duplicate/missing/gapped positions, result and grade
lists past the limits, unknown grades, oversized strings (up to 180 KB), unknown schema versions and
types, events on another type's topic, and fuzzed values (random truncations, byte flips of valid events,
random bytes). Labels for documents or sessions never shown are valid events (docs/events.md) and are
mixed in too, as are the fuzzed values that still decode.

After the worker drains it:

* the dead-letter topic holds every malformed event exactly once, byte for byte, with its key, the
  reason code the corpus expects in ``monitor.error.code``, a ``field: reason`` holding the expected
  message, and where it came from (topic, the key's partition, distinct offsets);
* ``search_relevance_dead_letters_total{reason}`` equals the corpus's count per reason code;
* the worker process never exited or restarted: same PID alive and answering, no traceback, no
  ``processing_error``;
* every relevance series equals ``MemoryPipeline`` run on the valid events only (the accepted samples
  included, nothing rejected), with the comparison of tests/integration/test_worker_e2e.py.

Three well-formed events with a wrong clock are mixed in too (docs/events.md, "Wrong clocks"): an
impression and a deploy dated 9999-12-31 in the middle of the stream, and an impression four days older
than its partition's latest near the end; each is a dead letter ``ts_out_of_range``, and none moves a
number.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from monitor.core.stream.partition import partition_for
from monitor.sim import SimConfig, simulate
from monitor.sim.corpus import build_corpus, interleave
from monitor.sim.records import SimEvent
from tests.support.worker_e2e import CONFIG, CONFIG_TOML, assert_same, comparable
from tests.support.worker_harness import Group, Stream, flush_events, parse_metrics, read_topic
from tests.support.worker_inputs import in_process, relevance, scored_sessions

pytestmark = pytest.mark.integration

SESSIONS = 3000
MALFORMED = 10_000
SEED = 31
FORBIDDEN_IN_LOG = ("Traceback", "processing failed", "failed; retrying", "crashed", "Restarting")


async def send_tombstones(stream: Stream, tombstones: list[tuple[str, bytes]]) -> None:
    """Kafka records with a key and no value (what log compaction deletes by): the worker must refuse
    them like any malformed event (an empty message), not crash on them."""
    producer = AIOKafkaProducer(bootstrap_servers=stream.bootstrap)
    await producer.start()
    try:
        for role, key in tombstones:
            await producer.send_and_wait(stream.topics[role], key=key, value=None,
                                         partition=partition_for(key, stream.partitions))
    finally:
        await producer.stop()


@dataclass(frozen=True)
class WrongClock:
    """A well-formed event with a wrong clock, as the corpus's samples: topic, key, value, code, message."""

    topic: str
    key: bytes
    value: bytes
    code: str
    expected: str


def wrong_clocks(events: list[SimEvent]) -> list[SimEvent]:
    """An impression and a deploy dated 9999-12-31, and an impression four days (more than state_ttl)
    older than the stream's start, keyed to a session id of the stream's (so its partition has traffic)."""
    far = 253_402_214_400.0
    first = min(e.ts for e in events)
    sid = next(json.loads(e.value)["session_id"] for e in events if e.topic == "impressions")
    results = [{"doc_id": "clock-d1", "position": 1, "score": 1.0}]

    def impression(session: str, ts: float) -> bytes:
        return json.dumps({"type": "impression", "session_id": session, "query": "clock query", "ranker": "r",
                           "ts": ts, "results": results}).encode()

    deploy = json.dumps({"type": "deploy", "kind": "deploy", "ranker": "clock-r", "previous": "r",
                         "ts": far}).encode()
    return [SimEvent("impressions", b"clock-future", impression("clock-future", far), far, "ts_out_of_range"),
            SimEvent("deploys", b"clock-r", deploy, far, "ts_out_of_range"),
            SimEvent("impressions", sid.encode(), impression(f"{sid}-clock-past", first - 4 * 86400.0),
                     first - 4 * 86400.0, "ts_out_of_range")]


def test_ten_thousand_malformed_events_become_dead_letters_and_leave_the_numbers_alone(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    started = time.monotonic()
    result = simulate(SimConfig(seed=SEED, n_sessions=SESSIONS, duration_s=6 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.0))
    corpus = build_corpus(result.events, malformed=MALFORMED, seed=SEED)
    malformed = [s for s in corpus if s.rejected]
    assert len(malformed) >= MALFORMED
    stream = Stream(kafka_bootstrap)
    flush = flush_events(stream, max(e.ts for e in result.events) + CONFIG.join_window + 1)
    mixed = interleave(result.events, corpus, seed=SEED)
    clocks = wrong_clocks(result.events)
    half = len(mixed) // 2
    records = [*mixed[:half], *clocks[:2], *mixed[half:-50], clocks[2], *mixed[-50:], *flush]
    valid = [r for r in records if r.expected_error is None]
    assert len(valid) == len(result.events) + len(flush) + len(corpus) - len(malformed)
    malformed = [*malformed, *(WrongClock(e.topic, e.key, e.value, "ts_out_of_range", "out of range")
                               for e in clocks)]

    expected = in_process(valid, stream.partitions)  # the accepted samples are valid events indeed
    assert scored_sessions(expected) > SESSIONS // 2  # the comparison below is about real numbers

    assert stream.send(records) == len(records)
    tombstones = [("impressions", f"tombstone-{i}".encode()) for i in range(3)] + [
        ("annotations", f"tombstone-{i}".encode()) for i in range(3, 5)]  # records without a value
    asyncio.run(send_tombstones(stream, tombstones))
    group = Group(stream, redis_url, tmp_path, "bad-input", CONFIG_TOML)
    try:
        worker = group.start()
        pid = worker.process.pid
        drain_started = time.monotonic()
        group.drain()
        drained = time.monotonic() - drain_started
        got = parse_metrics(worker.metrics_text())

        # the worker never exited nor restarted
        assert worker.process.poll() is None and worker.process.pid == pid and os.path.exists(f"/proc/{pid}")
        assert group.restarts_seen() == []
        assert worker.ready()
        log = worker.log.read_text(errors="replace")
        for needle in FORBIDDEN_IN_LOG:
            assert needle not in log, f"{needle!r} in the worker's log:\n{log[-4000:]}"
        consumed = sum(v for (n, _), v in got.items() if n == "search_relevance_events_total")
        assert consumed >= len(records) + len(tombstones)

        # every malformed event in the dead-letter topic exactly once, byte for byte, with its reason
        dead = read_topic(kafka_bootstrap, group.outputs.dead_letters)
        role = {name: r for r, name in stream.topics.items()}
        got_letters = Counter((role[h["monitor.source.topic"].decode()], key, value, h["monitor.error.code"].decode())
                              for key, value, h in dead)
        want_letters = Counter((s.topic, s.key, s.value, s.code) for s in malformed)
        want_letters.update((topic, key, b"", "invalid_json") for topic, key in tombstones)  # value: empty
        assert got_letters == want_letters, (sum((want_letters - got_letters).values()),
                                             sum((got_letters - want_letters).values()))
        expected_message = {(s.topic, s.key, s.value): s.expected for s in malformed}
        expected_message.update({(topic, key, b""): "a Kafka tombstone" for topic, key in tombstones})
        sources = set()
        for key, value, headers in dead:
            topic = role[headers["monitor.source.topic"].decode()]
            partition = int(headers["monitor.source.partition"])
            assert key is not None and partition == partition_for(key, stream.partitions)
            sources.add((topic, partition, int(headers["monitor.source.offset"])))
            message = f"{headers['monitor.error.field'].decode()}: {headers['monitor.error.reason'].decode()}"
            want = expected_message[(topic, key, value)]
            assert want is None or want in message, (want, message)
        assert len(sources) == len(dead)

        # the dead-letter counters by reason equal the corpus's counts
        counted = {dict(labels)["reason"]: v for (n, labels), v in got.items()
                   if n == "search_relevance_dead_letters_total"}
        assert counted == dict(Counter(s.code for s in malformed) + Counter({"invalid_json": len(tombstones)}))

        # the valid events' numbers are what the in-process core makes of the valid events alone
        assert_same(relevance(got), expected)
        assert len(comparable(expected)) > 100
    finally:
        group.stop()
    print(f"\n{len(malformed)} malformed + {len(records) - len(malformed)} valid messages "
          f"({len(corpus) - len(malformed)} accepted samples); drained in {drained:.1f} s; "
          f"dead letters by reason: {dict(sorted(counted.items()))}; "
          f"whole test {time.monotonic() - started:.1f} s")
