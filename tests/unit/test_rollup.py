"""The rollup of what ``/metrics`` exports, without services (issue 17 part 3): its encoding, its key, the
exporter's timing and its setting.

* encoded and decoded, a rollup exports exactly what its parts export (every sample equal, bit for bit,
  in the same order), on a simulated stream with canary verdicts, deploys, infinities and counters; bytes
  that are not a rollup of this format are refused;
* the fingerprint in its key is the same for equal settings however they were built, and changes with a
  stream or canary setting; the lease and the value share one Redis Cluster hash slot;
* the exporter's timing: a rollup is fresh at least until its successor is due, both when its exporter
  lives (the next computation, at most a tenth of its time) and when it dies just after storing it (the
  lease runs out, another worker takes it within a tick and computes);
* ``MONITOR_ROLLUP_INTERVAL``: 5 s by default, a positive number of seconds;
* ``MONITOR_MAX_ROLLUP_AGE``: 30 s by default; ``/readyz``'s problems name a rollup older than that even
  while it is within the freshness its exporter promised (the rule over a given (at, fresh); the real
  Redis read and a killed exporter: tests/integration/test_rollup.py).

The lease itself (Lua in Redis) is tested on a real server: tests/integration/test_rollup.py.
"""

from __future__ import annotations

import asyncio
import itertools
import math

import msgspec
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from redis.asyncio import Redis
from redis.crc import key_slot

from monitor.core.canary import CanaryConfig, comparisons, detect_deploys
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter, dead_letter
from monitor.core.stream.snapshot import Snapshot
from monitor.export.prometheus import RelevanceCollector
from monitor.export.verdict_gauges import CanaryCollector
from monitor.sim import SimConfig, simulate
from monitor.store.keys import Keys
from monitor.store.memory import MemoryPipeline
from monitor.store.writer import RedisState
from monitor.worker.rollup import FORMAT, Rollup, RollupBody, decode, encode, fingerprint
from monitor.worker.rollup_lease import TICK, RollupLease
from monitor.worker.settings import SettingsError, load_settings
from monitor.worker.verdicts import Verdicts

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

CONFIG = StreamConfig()


@pytest.fixture(scope="module")
def shared() -> RollupBody:
    """What a scrape of a simulated stream exports of the shared state (the in-process pipeline's)."""
    memory = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=4)
    for event in simulate(SimConfig(seed=5, n_sessions=2500, duration_s=6 * 3600, invalid_rate=0.03)).events:
        memory.submit(event.topic, event.key, event.value)
    deploys = sorted((d for d in memory.deploys if isinstance(d, Deploy)), key=lambda d: d.ts)
    history = memory.history()
    every = sorted([*deploys, *detect_deploys(history, deploys)], key=lambda d: d.ts)
    return RollupBody(memory.snapshot(), Verdicts(comparisons(history, deploys, CanaryConfig()), every), 17,
                  123_456_789)


def exposition(shared: RollupBody) -> bytes:
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(lambda: shared.snapshot, 3, 2))
    registry.register(CanaryCollector(lambda: (shared.verdicts.comparisons, shared.verdicts.deploys), 3))
    return generate_latest(registry)


def test_a_decoded_rollup_exports_exactly_what_was_encoded(shared: RollupBody) -> None:
    rollup = Rollup(shared, 1_763_800_000.125, 0.0421, 1_763_800_021.5, "host:42:abcd")
    back = decode(encode(rollup), CONFIG)
    assert back == rollup  # dataclasses: every float equal, the verdicts, the deploys, the health
    assert exposition(back.shared) == exposition(shared)  # byte for byte: values, labels and order
    assert list(back.shared.snapshot.windows) == list(shared.snapshot.windows)
    assert list(back.shared.snapshot.counters) == list(shared.snapshot.counters)
    # not vacuous: windows, counters, verdicts (some with undefined parts), deploys, an infinite PNR
    text = exposition(shared).decode()
    assert "search_relevance_dcg{" in text and "search_relevance_canary_verdict{" in text
    assert "search_relevance_deploy_timestamp_seconds{" in text and "search_relevance_dead_letters_total{" in text
    assert len(shared.verdicts.comparisons) >= 4 and len(shared.snapshot.windows) >= 10


def test_special_floats_and_an_empty_state_survive() -> None:
    empty = RollupBody(MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=2).snapshot(), Verdicts([], []), 0, 0)
    assert empty.snapshot.watermark == -math.inf
    assert decode(encode(Rollup(empty, 1.0, 0.0, 2.0, "x")), CONFIG) == Rollup(empty, 1.0, 0.0, 2.0, "x")
    odd = RollupBody(Snapshot(CONFIG, 5.0, {("15m", "head|a|control"): {"dcg": math.inf, "rr": -0.0}},
                          {Counter("x"): 1e308, dead_letter("a:b"): 2.0}, {}, {}), Verdicts([], []), 1, 2)
    back = decode(encode(Rollup(odd, 1.0, 0.0, 2.0, "x")), CONFIG).shared.snapshot
    assert back.windows[("15m", "head|a|control")]["dcg"] == math.inf
    assert math.copysign(1.0, back.windows[("15m", "head|a|control")]["rr"]) == -1.0
    assert back.counters[Counter("x")] == 1e308 and back.counters[dead_letter("a:b")] == 2.0


@pytest.mark.parametrize("raw", [b"", b"\x00", msgspec.msgpack.encode([FORMAT + 1]), msgspec.msgpack.encode({"a": 1})])
def test_bytes_that_are_not_a_rollup_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError, match="rollup"):
        decode(raw, CONFIG)


def test_another_format_is_refused(shared: RollupBody) -> None:
    wire = msgspec.msgpack.decode(encode(Rollup(shared, 1.0, 0.0, 2.0, "x")))
    wire[0] = FORMAT + 1
    with pytest.raises(ValueError, match=f"format {FORMAT + 1}"):
        decode(msgspec.msgpack.encode(wire), CONFIG)


def test_the_fingerprint_follows_the_settings_the_values_depend_on() -> None:
    base = fingerprint(StreamConfig(), CanaryConfig())
    assert base == fingerprint(StreamConfig(k={"head": 40, "torso": 20, "tail": 20}), CanaryConfig(alpha=0.05))
    assert len(base) == 16 and int(base, 16) >= 0
    changed = {
        fingerprint(StreamConfig(windows={"15m": 900.0, "1h": 3600.0}), CanaryConfig()),
        fingerprint(StreamConfig(epoch=600.0), CanaryConfig()),
        fingerprint(StreamConfig(query_history=False), CanaryConfig()),
        fingerprint(StreamConfig(), CanaryConfig(alpha=0.01)),
        fingerprint(StreamConfig(), CanaryConfig(sticky=False)),
    }
    assert base not in changed and len(changed) == 5


def test_the_lease_and_the_value_share_a_cluster_slot() -> None:
    for prefix, fp in (("srm", "0123456789abcdef"), ("e2e-x-one", fingerprint(CONFIG, CanaryConfig()))):
        keys = Keys(prefix)
        lease, value = keys.rollup(fp, "lease"), keys.rollup(fp, "value")
        assert lease != value and key_slot(lease.encode()) == key_slot(value.encode())
        assert lease.startswith(f"{prefix}:{{rollup:{fp}}}:")  # under the prefix: the ACL's ~srm:* covers it


def exporter(interval: float) -> RollupLease:
    """An exporter over a client that is never used (nothing here talks to Redis)."""
    state = RedisState(Redis.from_url("redis://127.0.0.1:1/0"), CONFIG, FOUR_LEVEL_SCALE, 4)
    return RollupLease(state, CanaryConfig(), interval, token="t")


@pytest.mark.parametrize(("interval", "took"), list(itertools.product([0.2, 1.0, 5.0, 30.0], [0.0, 0.01, 0.5, 3.0, 40.0])))
def test_a_rollup_is_fresh_until_its_successor_is_due(interval: float, took: float) -> None:
    ex = exporter(interval)
    at = 1_000_000.0
    fresh = ex.fresh_until(at, took)
    tick = min(interval, TICK)
    wait = max(interval, 10 * took)  # the computation takes at most about a tenth of the exporter's time
    assert ex.ttl(took) >= 3 * interval and ex.ttl(took) >= 4 * took  # renewed every tick, and a computation
    # the exporter lives: its next computation starts within a tick of being due and takes as long
    assert fresh >= at + took + wait + tick + took
    # it died just after storing: the lease runs out, another worker asks within a tick and computes
    assert fresh >= at + took + ex.ttl(took) + tick + took
    assert fresh <= at + 2 * took + max(wait, ex.ttl(took)) + tick + interval  # and not much longer


def test_the_default_interval_and_its_freshness() -> None:
    ex = exporter(load_settings({}).rollup_interval)
    assert ex.interval == 5.0 and ex.ttl() == 15.0 and ex.tick == 1.0
    assert ex.fresh_until(0.0, 0.0) == 21.0  # docs/worker.md: "about 21 s"


def test_the_interval_setting() -> None:
    assert load_settings({"MONITOR_ROLLUP_INTERVAL": "0.5"}).rollup_interval == 0.5
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(SettingsError, match="MONITOR_ROLLUP_INTERVAL: must be a positive number of seconds"):
            load_settings({"MONITOR_ROLLUP_INTERVAL": bad})
    with pytest.raises(ValueError, match="positive"):
        exporter(0.0)


def test_the_max_age_setting() -> None:
    assert load_settings({}).max_rollup_age == 30.0
    assert load_settings({"MONITOR_MAX_ROLLUP_AGE": "2.5"}).max_rollup_age == 2.5
    for bad in ("0", "-1", "never"):
        with pytest.raises(SettingsError, match="MONITOR_MAX_ROLLUP_AGE: must be a positive number of seconds"):
            load_settings({"MONITOR_MAX_ROLLUP_AGE": bad})
    state = RedisState(Redis.from_url("redis://127.0.0.1:1/0"), CONFIG, FOUR_LEVEL_SCALE, 4)
    with pytest.raises(ValueError, match="max rollup age must be positive"):
        RollupLease(state, CanaryConfig(), 5.0, max_age=0.0)


@pytest.mark.parametrize(("age", "max_age", "fresh_in", "problem"), [
    (10.0, 30.0, 11.0, None),
    (31.0, 30.0, 40.0, "older than max_rollup_age (30 s)"),   # within its promise, older than the bound
    (31.0, None, 40.0, None),                                 # no bound: only the promise
    (25.0, 30.0, -1.0, "stale"),                              # past its promise, younger than the bound
])
def test_readiness_names_a_rollup_older_than_the_bound(age: float, max_age: float | None, fresh_in: float,
                                                      problem: str | None) -> None:
    state = RedisState(Redis.from_url("redis://127.0.0.1:1/0"), CONFIG, FOUR_LEVEL_SCALE, 4)
    ex = RollupLease(state, CanaryConfig(), 5.0, token="t", max_age=max_age)
    now = 1_000_000.0

    async def stored() -> tuple[float, float]:  # what Lease.freshness reads: (at, fresh)
        return now - age, now + fresh_in

    ex.lease.freshness = stored  # type: ignore[method-assign]
    found = asyncio.run(ex.problems(now))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found
