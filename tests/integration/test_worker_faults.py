"""Faults on the real stack (issue 8, item 1): each run ends with the numbers of a run without the fault.

One simulated stream (``make_run`` of test_worker_e2e: impressions, late, corrected and query-level labels,
deploys, 2% invalid events; ``MONITOR_E2E_SESSIONS // 10`` sessions, 2,000 by default) is consumed by a
fresh consumer group per test, while a fault is injected:

* the worker is killed with SIGKILL at 20 random points (seeded, one in each twentieth of the stream's
  first 90%, each after the restarted worker committed something, at a random delay so batches are
  caught at any step) and restarted each time, on one ``redis-server`` and again (the same stream, a
  new group) on the session's Redis Cluster of three primaries with a replica each (issue 17);
* ``redis-server`` is killed with SIGKILL mid-stream and restarted on its AOF;
* Redis loses acknowledged writes (an older AOF is put back, once under a running worker and once while the
  worker is down and no message follows): the worker re-reads the lost messages from Kafka by itself;
* the Kafka broker is stopped for 15 s mid-stream: the same worker process waits and resumes;
* Alertmanager is down when a canary regression fires: the notification is retried and arrives when it is
  back (on the canary traffic of test_canary_e2e).

After each of the first four, every relevance and canary gauge the worker exports equals (1e-9) what the
in-process core exports for the stream, and the 24h window equals the offline recomputation from the
simulator's truth (after the last, Alertmanager holds the regression alerts with the final verdicts' text,
as ``monitor canary`` computes them from Redis). Dead letters: the state is exactly once (the dead-letter counter equals the number of invalid events),
the topic at least once (a crash between producing the outbox and trimming it, or a lost trim, publishes
an entry again): every invalid event is there, byte for byte with its reason, copies of one source offset
are identical, and nothing else is.

Two short tests on a real Redis show the guards underneath: a commit fenced by another commit writes
nothing and its batch is redone (a worker that lost its partition in a rebalance cannot apply a message
twice), and a batch over a hole in the applied offsets is refused (``StateBehind``) until what is missing
is applied.

Restarts use static group membership (``MONITOR_GROUP_INSTANCE_ID``): a restarted worker takes its place
in the group at once instead of waiting a session timeout (10 s) for the killed one to expire; what is recovered and how is the same. Redis faults run on a ``redis-server`` of their own.
"""

from __future__ import annotations

import functools
import json
import random
import shutil
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from monitor.core.canary.alerts import AlertConfig, annotations_of
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import dead_letter
from monitor.services.alertmanager import AlertmanagerServer
from monitor.services.install import BINARIES_OF, ensure_binaries
from monitor.services.ports import free_port
from monitor.services.redis_server import RedisServer
from monitor.services.server import LocalServer
from monitor.sim import simulate
from monitor.store.batch import Batch, Fenced, Message, Outcome, StateBehind
from monitor.store.client import is_cluster_url
from monitor.store.writer import RedisState
from monitor.worker.processor import Consumed, Processor
from monitor.worker.settings import Topics
from tests.fixtures.services import LocalService, ServiceHandle
from tests.support.canary_e2e import ALERT_INTERVAL, JOIN_WINDOW, TRAFFIC, comparison
from tests.support.http_helpers import eventually, http_json
from tests.support.worker_e2e import (
    CONFIG_TOML,
    SESSIONS,
    Progress,
    Run,
    assert_same,
    finish,
    make_run,
    new_group,
)
from tests.support.worker_harness import Group, Stream, Worker, flush_events, parse_metrics

pytestmark = pytest.mark.integration

FAULT_SESSIONS = max(SESSIONS // 10, 1000)
KILLS = 20
KAFKA_OUTAGE = 15.0
STATIC = {"MONITOR_GROUP_INSTANCE_ID": "worker-0"}


# -- fixtures -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run(kafka_bootstrap: str) -> Run:
    return make_run(kafka_bootstrap, FAULT_SESSIONS, seed=23)


def own(server: LocalServer, request: pytest.FixtureRequest) -> LocalServer:
    """A server of this test alone (it is killed, stopped, its files replaced), started and ready."""
    ensure_binaries(BINARIES_OF[server.name])
    request.addfinalizer(server.stop)
    server.start(die_with_parent=True)
    server.wait_ready()
    return server


@pytest.fixture
def own_redis(tmp_path: Path, request: pytest.FixtureRequest) -> RedisServer:
    server = own(RedisServer(tmp_path, free_port()), request)
    assert isinstance(server, RedisServer)
    return server


@pytest.fixture
def own_alertmanager(tmp_path: Path, request: pytest.FixtureRequest) -> AlertmanagerServer:
    server = own(AlertmanagerServer(tmp_path, free_port()), request)
    assert isinstance(server, AlertmanagerServer)
    return server


def local(handle: ServiceHandle, what: str) -> LocalServer:
    """The server process behind a session fixture, which this test stops and starts again."""
    if not isinstance(handle, LocalService):
        pytest.fail(f"{what} at {handle.address} was not started by this session; this test must stop and "
                    f"start it (unset MONITOR_TEST_* and use MONITOR_TEST_SERVICES=local)", pytrace=False)
    return handle.server


# -- what every test checks at the end ----------------------------------------------------------------

def eventually_same(worker: Worker, run: Run, seconds: float) -> float:
    """Wait until the worker exports the stream's numbers (no message arrives to trigger anything)."""
    started = time.monotonic()
    while True:
        try:
            assert_same(parse_metrics(worker.metrics_text()), run.expected)
            return time.monotonic() - started
        except AssertionError:
            if time.monotonic() - started > seconds:
                raise
            time.sleep(0.5)


# -- Redis: the fence and the hole check, on the state alone ----------------------------------------------

async def test_a_stale_commit_is_fenced_and_a_hole_is_refused(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    config = StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
    prefix = f"fence-{uuid.uuid4().hex[:8]}"
    one, other = (RedisState(client, config, FOUR_LEVEL_SCALE, 1, prefix=prefix, clock=lambda: None) for _ in range(2))
    deploy = b'{"type": "deploy", "kind": "deploy", "ranker": "r", "ts": 100.0}'
    meta = f"{prefix}:{{g0}}:p0:meta"
    try:
        await one.handle_batch(0, [Message("deploys", 0, deploy), Message("deploys", 1, deploy)], previous={})
        seen = await client.hget(meta, "seq")
        assert isinstance(seen, bytes)
        await other.handle_batch(0, [Message("deploys", 2, deploy)], previous={})  # the partition's new owner
        # a worker that read before that commit cannot write after it: nothing of its batch lands
        stale = Message("deploys", 2, deploy)
        with pytest.raises(Fenced):
            await one._commit(0, Batch(0), {stale.topic: 3}, fence=seen.decode())
        assert await one.applied(0) == {"deploys": 2}
        assert len(await one.deploys()) == 3
        # Redis lost writes (offsets 1 and 2 gone): the next message may not be applied over the hole
        await client.hset(meta, "off:deploys", 0)
        with pytest.raises(StateBehind) as behind:
            await one.handle_batch(0, [Message("deploys", 3, deploy)], previous={"deploys": 2})
        assert (behind.value.topic, behind.value.stored, behind.value.offset) == ("deploys", 0, 3)
        assert await one.applied(0) == {"deploys": 0}
        # once what is missing is applied again, it goes on
        await one.handle_batch(0, [Message("deploys", 1, deploy), Message("deploys", 2, deploy)],
                               previous={"deploys": 0})
        await one.handle_batch(0, [Message("deploys", 3, deploy)], previous={"deploys": 2})
        assert await one.applied(0) == {"deploys": 3}
        # offsets with a gap Kafka really has (compaction, transaction markers) are no hole
        await one.handle_batch(0, [Message("deploys", 7, deploy)], previous={"deploys": 3})
        assert await one.applied(0) == {"deploys": 7}
    finally:
        await client.aclose()



class Interleaved(RedisState):
    """A real RedisState that runs ``before_commit`` (once) between its read and its commit."""

    before_commit: Callable[[], Awaitable[object]] | None = None

    async def _commit(self, partition: int, batch: Batch, offsets: Mapping[str, int],
                      fence: str | None = None) -> None:
        hook, self.before_commit = self.before_commit, None
        if hook is not None:
            await hook()
        await super()._commit(partition, batch, offsets, fence)


async def test_a_worker_that_lost_its_partition_redoes_its_batch_instead_of_applying_it_twice(
        redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    config = StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
    prefix = f"zombie-{uuid.uuid4().hex[:8]}"
    topics = Topics("i", "a", "d", "dead", "requests")
    zombie_state = Interleaved(client, config, FOUR_LEVEL_SCALE, 1, prefix=prefix, clock=lambda: None)
    zombie = Processor(zombie_state, topics)
    owner = Processor(RedisState(client, config, FOUR_LEVEL_SCALE, 1, prefix=prefix, clock=lambda: None), topics)
    deploy = b'{"type": "deploy", "kind": "deploy", "ranker": "r", "ts": 100.0}'
    batch = [Consumed("d", 0, 0, b"r", deploy), Consumed("d", 0, 1, b"x", b"not json"),
             Consumed("d", 0, 2, b"r", deploy)]
    try:
        # the zombie read the partition; before it commits, the new owner applies the same messages
        zombie_state.before_commit = functools.partial(owner.handle_batch, batch)
        outcomes = await zombie.handle_batch(batch)
        assert zombie.fenced == 1 and all(o.skipped for o in outcomes)
        snapshot = await zombie_state.snapshot()
        assert snapshot.counters[dead_letter("invalid_json")] == 1  # once, not twice
        assert len(await zombie_state.deploys()) == 2
        assert await zombie_state.applied(0) == {"d": 2}
        assert await client.llen(f"{prefix}:{{g0}}:p0:outbox") == 1  # the one dead letter, once
    finally:
        await client.aclose()

class Failing(RedisState):
    """A real RedisState whose batches holding ``offset`` raise ``failures`` times before working."""

    offset, failures = -1, 0

    async def handle_batch(self, partition: int, messages: Sequence[Message],
                           previous: Mapping[str, int] | None = None) -> list[Outcome]:
        if self.failures > 0 and any(m.offset == self.offset for m in messages):
            self.failures -= 1
            raise RuntimeError("a passing failure")
        return await super().handle_batch(partition, messages, previous)


@pytest.mark.parametrize(("failures", "dead"), [(3, 0), (4, 1)])
async def test_a_message_failing_for_a_while_is_tried_again_and_only_then_dead_lettered(
        redis_url: str, failures: int, dead: int) -> None:
    """The batch fails, then the message alone up to three times: three failures in a row still apply it
    (the batch's other messages too, once each); a fourth makes it a ``processing_error`` dead letter."""
    client = Redis.from_url(redis_url)
    prefix = f"failing-{uuid.uuid4().hex[:8]}"
    state = Failing(client, StreamConfig(budget={"head": 1e9, "torso": 1e9, "tail": 1e9}), FOUR_LEVEL_SCALE, 1,
                    prefix=prefix, clock=lambda: None)
    state.offset, state.failures = 1, failures
    processor = Processor(state, Topics("i", "a", "d", "dead", "requests"), retry_delay=0.01)
    deploys = [Consumed("d", 0, n, b"r", json.dumps(
        {"type": "deploy", "kind": "deploy", "ranker": f"r{n}", "ts": 100.0 + n}).encode()) for n in range(3)]
    try:
        outcomes = await processor.handle_batch(deploys)
        assert processor.processing_retries == min(failures - 1, 2)
        assert [o.dead_letter is not None for o in outcomes] == [False, dead == 1, False]
        if dead:
            assert outcomes[1].dead_letter is not None and outcomes[1].dead_letter.code == "processing_error"
            assert "RuntimeError: a passing failure" in outcomes[1].dead_letter.reason
        assert [d.ranker for d in await state.deploys()] == [f"r{n}" for n in range(3) if n != 1 or not dead]
        assert await state.applied(0) == {"d": 2}
        snapshot = await state.snapshot()
        assert snapshot.counters.get(dead_letter("processing_error"), 0) == dead
    finally:
        await client.aclose()


# -- (a) the worker killed 20 times --------------------------------------------------------------------

@pytest.fixture(params=["redis-server", "redis-cluster"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The worker's state store: the session's redis-server, then its Redis Cluster (three primaries, a
    replica each: ``redis+cluster://``)."""
    return str(request.getfixturevalue("redis_url" if request.param == "redis-server" else "redis_cluster_url"))


def test_worker_sigkilled_at_20_random_points_ends_with_the_same_numbers(
        run: Run, store_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    # a group of its own per store: one that found the stream's offsets committed would have nothing to do
    name = "killed20-cluster" if is_cluster_url(store_url) else "killed20"
    # batches of 250: a restarted worker applies a batch or two before the next kill, and larger batches
    # (the default 2,000; 500 once the worker drained this stream at ~10,000 messages/s) carry the kills
    # past the stream's end
    group = new_group(run, store_url, tmp_path, group_factory, name, {**STATIC, "MONITOR_BATCH_SIZE": "250"})
    progress = Progress(store_url, group)
    rng = random.Random(20)
    # one random point in each twentieth of the stream's first 80%: a restarted worker applies a batch or
    # two before it is killed again (1,000-1,600 messages past its target here), so a run of targets close
    # together would carry the kills past the end
    targets = [(0.02 + 0.78 * (i + rng.random()) / KILLS) * run.messages for i in range(KILLS)]
    started = time.monotonic()
    worker = group.start()
    kills = [0]
    for target in targets:
        progress.wait(max(target, kills[-1] + 1))  # the restarted worker has committed something
        # anywhere in a batch: reading, committing, producing, acking. A batch of 250 takes some 30 ms at
        # this stream's rate (~10,000 messages/s since the consumer keeps impressions in step with their
        # labels); a wait of up to 0.3 s let one kill run ~3,000 messages on and the kills past the end
        time.sleep(rng.uniform(0.0, 0.04))
        group.kill(worker)
        kills.append(progress.applied())
        worker = group.start()
    kills = kills[1:]
    twice = finish(run, group, worker)
    assert len(set(kills)) == KILLS and all(0 < k < run.messages for k in kills), kills  # all mid-stream
    print(f"\n{KILLS} kills at {kills} of {run.messages} messages; drained after "
          f"{time.monotonic() - started:.1f} s; {twice} dead letters published twice")
    assert group.restarts_seen() == []


# -- (b) redis-server killed, and Redis losing acknowledged writes --------------------------------------

def test_redis_sigkilled_mid_stream_and_restarted(
        run: Run, own_redis: RedisServer, tmp_path: Path, group_factory: list[Group]) -> None:
    group = new_group(run, own_redis.address, tmp_path, group_factory, "redis-killed")
    progress = Progress(own_redis.address, group)
    worker = group.start()
    before = progress.wait(run.messages / 3)
    own_redis.kill()
    time.sleep(2.0)
    own_redis.start(die_with_parent=True)
    own_redis.wait_ready()
    after = progress.applied()
    finish(run, group, worker)
    assert before <= after < run.messages  # appendfsync always: the AOF had every acknowledged write
    retries = parse_metrics(worker.metrics_text())[("search_relevance_redis_retries_total", ())]
    assert retries > 0  # the worker did see Redis go away
    assert "redis lost writes" not in worker.log.read_text()  # and never had to re-read Kafka
    assert worker.process.poll() is None and group.restarts_seen() == []


def copy_aof(server: RedisServer, to: Path) -> Path:
    """A copy of the AOF as it is now (a prefix of every later one: Redis only appends to it)."""
    shutil.copytree(server.dir / "data" / "appendonlydir", to)
    return to


def restore_aof(server: RedisServer, copy: Path) -> None:
    """Crash Redis and start it on an older AOF: it comes back without the writes since ``copy``."""
    server.kill()
    target = server.dir / "data" / "appendonlydir"
    shutil.rmtree(target)
    shutil.copytree(copy, target)
    server.start(die_with_parent=True)
    server.wait_ready()


def test_redis_losing_acknowledged_writes_is_caught_up_from_kafka(
        run: Run, own_redis: RedisServer, tmp_path: Path, group_factory: list[Group]) -> None:
    redis.Redis.from_url(own_redis.address).config_set("auto-aof-rewrite-percentage", 0)  # copies stay valid
    group = new_group(run, own_redis.address, tmp_path, group_factory, "redis-lost", {**STATIC, "MONITOR_LOG_LEVEL": "info"})
    progress = Progress(own_redis.address, group)
    worker = group.start()

    # 1. under a running worker, mid-stream: Redis goes back from half the stream to near its start
    progress.wait(run.messages / 20)
    older = copy_aof(own_redis, tmp_path / "aof-1")
    lost_from = progress.wait(run.messages / 2)
    restore_aof(own_redis, older)
    back_to = progress.applied()
    assert 0 < back_to < lost_from  # acknowledged writes are gone, and Kafka's offsets are past them
    progress.wait(run.messages * 0.8)
    older = copy_aof(own_redis, tmp_path / "aof-2")
    finish(run, group, worker)
    first = worker.log.read_text()
    assert "redis lost writes" in first and "re-applied" in first

    # 2. after the end of the stream, with the worker down: no message will come to show the hole
    group.kill(worker)
    restore_aof(own_redis, older)
    behind = progress.applied()
    assert behind < run.messages
    worker = group.start()
    seconds = eventually_same(worker, run, seconds=90)
    twice = finish(run, group, worker)
    assert "redis lost writes" in worker.log.read_text()
    assert worker.process.poll() is None and group.restarts_seen() == []
    print(f"\nRedis went back from {lost_from} to {back_to} applied messages under the worker, then from "
          f"the end to {behind} with the worker down; caught up {seconds:.1f} s after the restart; "
          f"{twice} dead letters published twice")


# -- (c) the Kafka broker stopped mid-stream ------------------------------------------------------------

def test_kafka_broker_outage_is_waited_out_by_the_same_worker(
        run: Run, kafka_service: ServiceHandle, redis_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    kafka = local(kafka_service, "Kafka")
    group = new_group(run, redis_url, tmp_path, group_factory, "kafka-outage")
    progress = Progress(redis_url, group)
    worker = group.start()
    before = progress.wait(run.messages / 3)
    kafka.stop()
    try:
        time.sleep(KAFKA_OUTAGE)
        during = progress.applied()
        assert worker.process.poll() is None
    finally:
        kafka.start(die_with_parent=True)
        kafka.wait_ready()
    assert before <= during < run.messages  # stopped mid-stream
    started = time.monotonic()
    finish(run, group, worker)
    assert worker.process.poll() is None and group.restarts_seen() == []  # the same process, no help
    print(f"\nKafka down {KAFKA_OUTAGE:.0f} s at {before} of {run.messages} messages; drained "
          f"{time.monotonic() - started:.1f} s after it came back")


# -- (d) Alertmanager down when an alert fires ----------------------------------------------------------

def test_an_alert_fired_while_alertmanager_is_down_arrives_when_it_is_back(
        kafka_bootstrap: str, redis_url: str, own_alertmanager: AlertmanagerServer, tmp_path: Path,
        group_factory: list[Group]) -> None:
    tag = uuid.uuid4().hex[:10]
    control, canary = f"control-{tag}", f"canary-{tag}"
    result = simulate(replace(TRAFFIC, regression=0.10, control_ranker=control, canary_ranker=canary,
                              id_prefix=f"s{tag}"))
    stream = Stream(kafka_bootstrap)
    events = [*result.events,
              *flush_events(stream, max(e.ts for e in result.events) + JOIN_WINDOW + 1, prefix=f"flush{tag}")]
    assert stream.send(events) == len(events)
    url = own_alertmanager.address
    own_alertmanager.stop()
    group = Group(stream, redis_url, tmp_path, f"am-down-{tag}", CONFIG_TOML, extra_env={
        "MONITOR_ALERTMANAGER_URL": url, "MONITOR_ALERT_INTERVAL": str(ALERT_INTERVAL),
        "MONITOR_LOG_LEVEL": "info"})
    group_factory.append(group)
    worker = group.start()

    def failed() -> bool:
        """the regression fired and the worker failed to notify Alertmanager"""
        return "cannot send" in worker.log.read_text()

    eventually(failed, seconds=120)
    fired = time.monotonic()
    time.sleep(4.0)  # past two more tries (the client waits 1 s, then 2 s, 4 s, ... up to 60 s)
    assert "reachable again" not in worker.log.read_text()
    own_alertmanager.start(die_with_parent=True)
    own_alertmanager.wait_ready()
    back = time.monotonic()

    def delivered() -> bool:
        """the worker's retry reached Alertmanager"""
        return "reachable again; delivered" in worker.log.read_text()

    eventually(delivered, seconds=30)  # a retry, not the re-send of firing alerts (every 60 s)
    retried = time.monotonic()

    # what arrived is the regression of the final verdicts (its text updated as the stream went on)
    group.drain()
    done = group.cli("canary", "--candidate", canary, "--json")
    assert done.returncode == 1, done.stderr
    rows = json.loads(done.stdout)
    regressions = {(r["bucket"], r["metric"]): r for r in rows if r["verdict"] == "regression"}
    assert {b for b, _ in regressions} == {"tail"}, rows
    wanted = {key: annotations_of(comparison(row), AlertConfig())["summary"] for key, row in regressions.items()}
    query = urllib.parse.urlencode({"filter": f'ranker="{canary}"'})

    def arrived() -> dict[tuple[str, str], str]:
        """Alertmanager holds the regression alerts with their final text"""
        got = {(a["labels"]["bucket"], a["labels"]["metric"]): a["annotations"]["summary"]
               for a in http_json(f"{url}/api/v2/alerts?{query}")}
        return got if got == wanted else {}

    eventually(arrived, seconds=30)
    print(f"\nthe alert fired {back - fired:.1f} s before Alertmanager was back; a retry delivered it "
          f"{retried - back:.1f} s after")
    assert worker.process.poll() is None and group.restarts_seen() == []
