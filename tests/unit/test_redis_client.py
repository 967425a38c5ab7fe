"""monitor/store/client.py without a server: which client a URL gives, with which nodes and options, and
which errors count as Redis being unreachable for now (the worker waits those out, never drops a message)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import (
    ClusterCrossSlotError,
    ClusterDownError,
    ClusterError,
    DataError,
    MasterDownError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from monitor.store.client import (
    REDIS_UNAVAILABLE,
    ClusterUnavailable,
    HiredisPacking,
    MonitorCluster,
    NotReplicated,
    cluster_seeds,
    connect,
    is_cluster_url,
    packed_by_hiredis,
)
from monitor.store.scripts import ScriptsMissing


def test_one_server_urls_give_the_plain_client() -> None:
    for url, kind in (("redis://127.0.0.1:6379/0", Connection), ("rediss://u:p@redis:6380/1", SSLConnection),
                      ("unix:///run/redis.sock", UnixDomainSocketConnection)):
        client = connect(url, socket_timeout=3)
        assert type(client) is Redis and not is_cluster_url(url)
        assert client.connection_pool.connection_kwargs["socket_timeout"] == 3
        assert client.connection_pool.connection_class.__mro__[1:3] == (HiredisPacking, kind)


COMMANDS = [("GET", "srm:{g0}:p0:meta"), ("MGET", *(f"srm:{{g1}}:p5:s:s-{i}" for i in range(3000))),
            ("SET", "k", "蓝牙耳机", "EX", 60), ("ZADD", "dl", 1763712000.566, "s-1", float("inf"), "s-2"),
            ("HINCRBYFLOAT", "h", "f", -0.1), ("EVALSHA", "ab" * 20, 1, "k", b"\x00\xff" * 5000, 2**70),
            ("CONFIG GET", "maxmemory"), (b"CLIENT SETNAME", "monitor-worker:h:1"), ("SET", "m", memoryview(b"xy"))]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_hiredis_packs_every_command_byte_for_byte_as_redis_py_does(command: tuple[object, ...]) -> None:
    python, packed = Connection(), packed_by_hiredis(Connection)()
    assert b"".join(packed.pack_command(*command)) == b"".join(map(bytes, python.pack_command(*command)))
    both = [command, ("PING",), command]
    assert b"".join(packed.pack_commands(both)) == b"".join(map(bytes, python.pack_commands(both)))


def test_hiredis_packing_refuses_what_redis_py_refuses_with_its_error() -> None:
    packed = packed_by_hiredis(Connection)()
    for value in (None, {"a": 1}, [1]):
        with pytest.raises(DataError):
            packed.pack_command("SET", "k", value)
    assert packed_by_hiredis(Connection) is packed_by_hiredis(packed_by_hiredis(Connection))


def test_a_cluster_url_gives_the_cluster_client_seeded_with_every_node() -> None:
    url = "redis+cluster://monitor:secret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/0"
    assert is_cluster_url(url)
    first, seeds = cluster_seeds(url)
    assert first == "redis://monitor:secret@10.0.0.1:7000/0"
    assert seeds == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)]
    client = connect(url, socket_timeout=3, health_check_interval=30)
    assert isinstance(client, MonitorCluster) and isinstance(client, RedisCluster)
    assert sorted(node.name for node in client.startup_nodes) == sorted(f"{h}:{p}" for h, p in seeds)
    kwargs = client.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["socket_timeout"]) == ("monitor", "secret", 3)
    assert kwargs["connection_class"].__mro__[1:3] == (HiredisPacking, Connection)
    assert all(issubclass(node.connection_class, HiredisPacking) for node in client.startup_nodes)


def test_a_tls_cluster_url_gives_tls_connections_with_the_given_ca() -> None:
    client = connect("rediss+cluster://10.0.0.1:7000/0", ssl_ca_certs="/etc/ca.pem")
    assert isinstance(client, RedisCluster)
    assert client.connection_kwargs["connection_class"].__mro__[1:3] == (HiredisPacking, SSLConnection)
    assert client.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"


@pytest.mark.parametrize("url", ["redis+cluster://10.0.0.1/0", "redis+cluster://10.0.0.1:7000,:7001/0"])
def test_a_cluster_url_needs_a_port_for_every_node(url: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        cluster_seeds(url)


def test_what_counts_as_redis_unreachable_for_now() -> None:
    waited = [RedisConnectionError("refused"), ClusterUnavailable("no node"), OSError("reset"),
              NotReplicated("no replica of 127.0.0.1:7000"), ScriptsMissing("NOSCRIPT"),
              ClusterDownError("CLUSTERDOWN The cluster is down"), MasterDownError("MASTERDOWN"),
              ClusterError("TTL exhausted."), TryAgainError("TRYAGAIN"), SlotNotCoveredError("slot 5")]
    assert all(isinstance(error, REDIS_UNAVAILABLE) for error in waited)
    bugs = [ClusterCrossSlotError("CROSSSLOT"), ResponseError("FENCED seq is 3, expected 2"), ValueError("x")]
    assert not any(isinstance(error, REDIS_UNAVAILABLE) for error in bugs)


async def test_a_cluster_no_node_of_which_answers_is_a_connection_error() -> None:
    from monitor.services.ports import free_port

    client = connect(f"redis+cluster://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    try:
        with pytest.raises(ClusterUnavailable, match="cannot be connected"):
            await client.get("srm:{g0}:p0:meta")
    finally:
        await client.aclose()
