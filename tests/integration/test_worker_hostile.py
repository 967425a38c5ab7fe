"""Issue 15's hostile-input suite on the real worker (Kafka, Redis, ``monitor worker``): every kind of
hostile input at once, and the valid events give exactly the numbers the embedded default gives for them
alone.

World: the simulator's realistic settings (tests/unit/test_hostile_input.world: 5% of sessions labelled,
early labels, corrections, duplicates, an 8% night dip), 1,500 sessions over 12 hours on 4 partitions.
Mixed in:

* the annotations of a fifth of the sessions and queries moved to the very start of the stream, before
  any impression (valid: they are part of the reference too, in their place);
* partition 0's impressions stop at half of the stream (valid; the reference has the same cut);
* 3,000 labels for sessions never shown (below the per-partition cap);
* 200 old grades re-sent after what they preceded, with an older ``ts``;
* 2,000 impressions of 2,000 distinct junk variant and ranker names (counted under ``other``: their
  series, with ``variant="other"``, are left out of the comparison);
* an impression and a deploy dated 9999-12-31, and an impression four ``state_ttl`` older than the rest.

The stream ends with one impression per partition past every deadline (``flush_events``), so every
session is closed in both (how a quiet partition closes without it: test_worker_quiet.py). Asserted:
the worker's relevance series equal ``MemoryPipeline``'s on the valid events alone (to 1e-9), the three
events with wrong clocks are dead letters ``ts_out_of_range`` and nothing else is, the worker never
exited, and the embedded default on the whole hostile stream gives its valid-only numbers too.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from monitor.core.stream.partition import partition_for
from monitor.sim.records import SimEvent
from tests.support.hostile import FAR_FUTURE, ghost, impression, resent_old_grades, world
from tests.support.worker_e2e import CONFIG, CONFIG_TOML, assert_same, comparable, exported
from tests.support.worker_harness import Group, Samples, Stream, flush_events, parse_metrics
from tests.support.worker_inputs import in_process, relevance

pytestmark = pytest.mark.integration

SEED = 5
PARTITIONS = 4


def declared(samples: Samples) -> Samples:
    """The series of declared variants (undeclared impressions are counted under ``variant="other"``)."""
    return {key: value for key, value in samples.items() if dict(key[1]).get("variant") != "other"}


def valid_stream() -> list[tuple[str, bytes, bytes]]:
    """The valid events in delivery order: labels of a fifth of the keys first, partition 0's impressions
    cut at half of the stream."""
    events = world(SEED, sessions=1500)
    rng = random.Random(SEED)
    cut = json.loads(next(v for t, _, v in events[len(events) // 2:] if t == "impressions"))["ts"]
    events = [e for e in events if not (e[0] == "impressions" and partition_for(e[1], PARTITIONS) == 0
                                        and json.loads(e[2])["ts"] >= cut)]
    chosen = {k for k in sorted({e[1] for e in events if e[0] == "annotations"}) if rng.random() < 0.2}
    first = [e for e in events if e[0] == "annotations" and e[1] in chosen]
    return first + [e for e in events if not (e[0] == "annotations" and e[1] in chosen)]


def hostile(valid: list[tuple[str, bytes, bytes]]) -> tuple[list[tuple[str, bytes, bytes]], int]:
    """``valid`` with the hostile events mixed in; how many have a wrong clock."""
    rng = random.Random(SEED + 1)
    mixed = list(valid)
    for event in [ghost(i) for i in range(3000)]:
        mixed.insert(rng.randrange(len(mixed) + 1), event)
    for event in resent_old_grades(valid, rng, 200):
        key, value = event[1], json.loads(event[2])
        after = max(i for i, e in enumerate(mixed) if e[0] == "annotations" and e[1] == key
                    and b'"ts"' in e[2] and json.loads(e[2])["ts"] > value["ts"])
        mixed.insert(rng.randrange(after + 1, len(mixed) + 1), event)
    for i in range(2000):  # junk variants and rankers, dated like the impression before them
        at = rng.randrange(1, len(mixed) + 1)
        before = next((json.loads(v)["ts"] for t, _, v in reversed(mixed[:at]) if t == "impressions"), None)
        if before is not None:
            sid = f"junk-{i}"
            mixed.insert(at, ("impressions", sid.encode(),
                              impression(sid, before, ranker=f"junk-ranker-{i}", variant=f"junk-variant-{i}")))
    last = max(json.loads(v)["ts"] for t, _, v in valid if t == "impressions")
    clocks = [("impressions", b"future", impression("future", FAR_FUTURE)),
              ("deploys", b"r9", json.dumps({"type": "deploy", "kind": "deploy", "ranker": "r9",
                                             "ts": FAR_FUTURE, "previous": "ranker-a"}).encode())]
    for event in clocks:
        mixed.insert(rng.randrange(len(mixed) // 3, len(mixed)), event)
    mixed.append(("impressions", b"past", impression("past", last - 4 * CONFIG.state_ttl)))
    return mixed, len(clocks) + 1


def test_hostile_input_through_the_worker_leaves_the_valid_numbers_exact(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    began = time.monotonic()
    stream = Stream(kafka_bootstrap, partitions=PARTITIONS)
    valid = valid_stream()
    last = max(json.loads(v)["ts"] for t, _, v in valid if t == "impressions")
    flush = [(e.topic, e.key, e.value) for e in flush_events(stream, last + CONFIG.join_window + 1)]
    mixed, wrong_clocks = hostile(valid)
    records = [SimEvent(t, k, v, 0.0) for t, k, v in [*mixed, *flush]]
    expected = in_process([SimEvent(t, k, v, 0.0) for t, k, v in [*valid, *flush]], stream.partitions)
    assert sum(v for (n, _), v in expected.items() if n == "search_relevance_sessions_scored") > 0

    # the embedded default on the hostile stream: the valid numbers, the wrong clocks dead letters
    from monitor.core.grades import FOUR_LEVEL_SCALE
    from monitor.store.memory import MemoryPipeline
    memory = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=stream.partitions)
    for record in records:
        memory.submit(record.topic, record.key, record.value)
    assert {d.code for d in memory.dead_letters} == {"ts_out_of_range"}
    assert len(memory.dead_letters) == wrong_clocks
    assert comparable(declared(relevance(exported(memory)))) == pytest.approx(comparable(expected), rel=1e-9,
                                                                              abs=1e-9)
    junk = sum(1 for r in records if r.key.startswith(b"junk-"))
    assert memory.counter("undeclared", label="variant") == junk > 1000

    assert stream.send(records) == len(records)
    group = Group(stream, redis_url, tmp_path, "hostile", CONFIG_TOML)
    try:
        worker = group.start()
        group.drain()
        got = parse_metrics(worker.metrics_text())
        assert worker.process.poll() is None and group.restarts_seen() == []
    finally:
        group.stop()
    dead = {dict(labels)["reason"]: v for (n, labels), v in got.items()
            if n == "search_relevance_dead_letters_total" and v}
    assert dead == {"ts_out_of_range": wrong_clocks}
    assert_same(declared(relevance(got)), expected)
    undeclared = sum(v for (n, _), v in got.items() if n == "search_relevance_undeclared_impressions_total")
    assert undeclared == memory.counter("undeclared", label="variant")
    print(f"\nhostile stream: {len(records)} messages ({len(valid)} valid), worker drained and compared in "
          f"{time.monotonic() - began:.0f} s")
