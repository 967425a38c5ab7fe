"""The Redis client of the worker, ``monitor canary`` and ``monitor annotate``: one server or a Redis Cluster.

:func:`connect` reads the URL: ``redis://``, ``rediss://`` (TLS) and ``unix://`` give redis-py's asyncio
``Redis``; ``redis+cluster://`` and ``rediss+cluster://`` give its ``RedisCluster``, seeded with every
``host:port`` the URL lists (``redis+cluster://user:pw@10.0.0.1:6379,10.0.0.2:6379/0``; one reachable
node is enough, the others are found from it). A cluster has one database, 0. The keyword options
(timeouts, the password, CA and client certificate of ``settings.redis_options()``) go to every node's
connections alike.

Everything the monitor sends a cluster stays within one hash slot per command: a partition's keys share
the tag of its group, ``{g<G>}``, with the group's totals, and a query's keys ``{q:<hash>}``
(:mod:`monitor.store.keys`), so each MGET, Lua call and transaction names keys of one slot, and
pipelines (``transaction=False``) are split by node by the client. What a cluster pipeline refuses
has a way round here: :func:`queue_mget` and the scripts of :mod:`monitor.store.scripts` (queued as
``EVAL``). :func:`used_memory` sums ``INFO memory`` over the primaries.

The cluster client follows MOVED and ASK redirections and refreshes its map of slots after a failover by
itself (redis-py retries those, and connection errors, a few times). What still reaches the caller while
a primary is down and its replica not yet promoted is in :data:`REDIS_UNAVAILABLE`, the errors the
worker waits out with backoff like a single Redis being unreachable (never a reason to give a message
up); a cluster none of whose nodes answers raises :class:`ClusterUnavailable`, one of them.

Replication is asynchronous, so a replica promoted after its primary died may lack the primary's last
writes. The worker finds out for a partition's keys (its applied offsets are behind; it reads the
messages from Kafka again, docs/worker.md "Failure and recovery"), but not for a query's keys, which
another shard holds: :func:`execute_replicated` makes the per-query writes wait (``WAIT``) until a
replica has them, on each node the client's map of slots lists with a replica, and raises
:class:`NotReplicated`, one of :data:`REDIS_UNAVAILABLE`, when one does not confirm within
:data:`WAIT_TIMEOUT_MS` (the writes are idempotent: the batch is tried again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import hiredis
from redis._parsers import _AsyncHiredisParser
from redis._parsers import hiredis as redis_hiredis
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.exceptions import (
    ClusterError,
    DataError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

RedisClient = Redis | RedisCluster
"""What the Redis modules of :mod:`monitor.store` are given: one server or a cluster."""

RedisPipeline = Pipeline | ClusterPipeline

_HIREDIS_PARSER = _AsyncHiredisParser
_NOT_ENOUGH_DATA = getattr(redis_hiredis, "NOT_ENOUGH_DATA", False)
"""What the parser's hiredis reader gives for a reply not read whole yet (False before redis-py 6)."""

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The URL schemes of a Redis Cluster, and the scheme of each of its nodes."""


WAIT_TIMEOUT_MS = 1000
"""How long a node waits for a replica to confirm the per-query writes (a healthy one takes well under
a millisecond on one machine); longer means that replica is down or far behind."""


class ClusterUnavailable(RedisConnectionError):
    """No node of the Redis Cluster answered (or none knew who serves every slot yet)."""


class NotReplicated(RedisConnectionError):
    """A cluster node did not confirm in time that a replica has the writes just made."""


class MonitorCluster(RedisCluster):
    """redis-py's cluster client, except that a failed discovery of the cluster (no node reachable, the
    slots not all served yet) is a connection error (:class:`ClusterUnavailable`), as one server that
    does not answer is, instead of the ``RedisClusterException`` redis-py also raises for misuse."""

    async def initialize(self, additional_startup_nodes_info: list[tuple[str, int]] | None = None,
                         last_failed_node_name: str | None = None) -> RedisCluster:
        try:
            return await super().initialize(additional_startup_nodes_info, last_failed_node_name)
        except SlotNotCoveredError:
            raise
        except RedisClusterException as error:
            raise ClusterUnavailable(str(error)) from error


REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (
    RedisConnectionError,  # refused, reset, ClusterUnavailable
    RedisTimeoutError,
    OSError,
    ClusterError,  # CLUSTERDOWN while a primary fails over, MASTERDOWN, "TTL exhausted" redirections
    TryAgainError,  # a slot being migrated
    SlotNotCoveredError,  # a slot without a primary, for now
)
"""Errors that say Redis (or one shard of a cluster) cannot be reached now: wait and try again."""


def is_cluster_url(url: str) -> bool:
    """True for a ``redis+cluster://`` or ``rediss+cluster://`` URL."""
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL as the URL of its first node (``redis://`` or ``rediss://``, with the user, password,
    path and query) and every node it lists as (host, port); ``ValueError`` if it lists none, or a node
    without a port."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    seeds = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"a Redis Cluster URL lists nodes as host:port[,host:port...], got {item!r}")
        seeds.append((host.strip("[]"), int(port)))
    netloc = f"{userinfo}{at}{seeds[0][0]}:{seeds[0][1]}"
    first = urlunsplit((CLUSTER_SCHEMES[parts.scheme], netloc, parts.path, parts.query, parts.fragment))
    return first, seeds


class HiredisPacking:
    """Commands packed into the Redis protocol by hiredis (C), as redis-py's synchronous client does when
    hiredis is installed; its asyncio connections pack in Python, one argument at a time, growing one buffer
    by copies: about 5% of the worker's CPU per message, most of it the ``MGET`` of a batch's sessions
    (docs/scaling.md, "What one message costs"). Mixed into the connection class the URL chose (TCP, TLS,
    Unix socket): what the connection sends is byte for byte the same."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):  # a command name of several words ("CONFIG GET"): sent as arguments
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as error:  # what redis-py's encoder refuses (None, a dict...), with its error type
            raise DataError(str(error)) from None

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> list[bytes]:
        return [b"".join(self.pack_command(*command)[0] for command in commands)]

    async def read_response(self, disable_decoding: bool = False, timeout: float | None = None, *,
                            disconnect_on_error: bool = True, push_request: bool | None = False) -> Any:
        """A reply the hiredis reader already holds whole is taken as it is, without arming the read
        timeout: it cannot block. A pipeline's replies arrive together, and redis-py reads them one
        command at a time, each in an ``asyncio.timeout`` (a timer scheduled and cancelled, the running
        loop looked up four times, a ``getpid`` system call each): about 2% of the worker's CPU per
        message. Anything else (a reply not yet read whole, a push notification, an undecoded read, a
        timeout of the caller's) goes redis-py's way, which reads the socket under the timeout; what the
        fast path returns or raises is what that way would (tests/integration/test_redis_client_reads.py)."""
        parser: Any = getattr(self, "_parser", None)
        if timeout is None and not disable_decoding and not push_request and type(parser) is _HIREDIS_PARSER \
                and parser._connected:
            pushes = getattr(parser, "_hiredis_PushNotificationType", None)
            if pushes is not None or getattr(self, "protocol", 2) in (2, "2", None):  # pushes told apart
                reader: Any = parser._reader
                response = reader.gets()
                if response is _NOT_ENOUGH_DATA:  # not whole yet (nothing was taken from the reader)
                    pass
                elif pushes is not None and isinstance(response, pushes):  # handled, then the reply
                    handle: Any = parser.handle_push_response
                    await handle(response)
                else:
                    failed = response[0] if isinstance(response, list) and response else response
                    if isinstance(failed, RedisConnectionError):  # (LOADING...): as the parser raises it
                        if disconnect_on_error:
                            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
                        raise failed
                    connection: Any = self
                    if connection.health_check_interval:
                        connection.next_health_check = (asyncio.get_running_loop().time()
                                                        + connection.health_check_interval)
                    if isinstance(response, ResponseError):
                        raise response from None
                    return response
        return await super().read_response(  # type: ignore[misc]
            disable_decoding, timeout, disconnect_on_error=disconnect_on_error, push_request=push_request)


_PACKED: dict[type, type] = {}


def packed_by_hiredis(connection_class: type) -> type:
    """``connection_class`` with :class:`HiredisPacking` mixed in (made once per class)."""
    if issubclass(connection_class, HiredisPacking):
        return connection_class
    if connection_class not in _PACKED:
        name = f"Hiredis{connection_class.__name__}"
        _PACKED[connection_class] = type(name, (HiredisPacking, connection_class), {})
    return _PACKED[connection_class]


def connect(url: str, **options: Any) -> RedisClient:
    """The client for ``url`` (see the module docstring); ``options`` as for ``Redis.from_url``. Its
    connections pack commands with hiredis (:class:`HiredisPacking`)."""
    if not is_cluster_url(url):
        client = Redis.from_url(url, **options)
        pool = client.connection_pool
        pool.connection_class = packed_by_hiredis(pool.connection_class)
        return client
    first, seeds = cluster_seeds(url)
    others = [ClusterNode(host, port) for host, port in seeds[1:]]
    cluster = MonitorCluster.from_url(first, startup_nodes=others, **options)
    manager = cluster.nodes_manager  # the nodes it finds later are made with these keyword arguments
    kwargs = manager.connection_kwargs
    kwargs["connection_class"] = packed_by_hiredis(kwargs["connection_class"])
    for node in manager.startup_nodes.values():
        node.connection_class = packed_by_hiredis(node.connection_class)
    return cluster


def queue_mget(pipe: RedisPipeline, keys: list[str]) -> None:
    """Queue ``MGET keys`` in ``pipe`` (a cluster pipeline refuses ``pipe.mget``; keys of one slot are
    one command for it like any other)."""
    pipe.execute_command("MGET", *keys)


async def used_memory(redis: RedisClient) -> int:
    """``used_memory`` of ``INFO memory``, summed over a cluster's primaries."""
    if isinstance(redis, RedisCluster):
        by_node = await redis.info("memory", target_nodes=RedisCluster.PRIMARIES)
        return sum(int(info.get("used_memory", 0)) for info in by_node.values())
    info = await redis.info("memory")
    return int(info.get("used_memory", 0))


def queue_waits(redis: RedisClient, pipe: RedisPipeline, keys: Iterable[str]) -> dict[int, str]:
    """On a cluster, queue in ``pipe`` (after its writes) ``WAIT 1`` on each node serving some of ``keys``
    whose slot has a replica in the client's map; returns each WAIT's place in the pipeline → node."""
    if not isinstance(redis, RedisCluster) or not isinstance(pipe, ClusterPipeline):
        return {}
    nodes: dict[str, ClusterNode] = {}
    for key in keys:
        holders = redis.nodes_manager.slots_cache.get(redis.keyslot(key)) or []
        if len(holders) > 1:
            nodes[holders[0].name] = holders[0]
    waits = {}
    for name, node in sorted(nodes.items()):
        waits[len(pipe)] = name
        pipe.execute_command("WAIT", 1, WAIT_TIMEOUT_MS, target_nodes=node)
    return waits


async def execute_replicated(redis: RedisClient, pipe: RedisPipeline, keys: Iterable[str]) -> list[Any]:
    """Execute ``pipe``, whose commands write ``keys``, and return its replies; on a cluster only once a
    replica of each node written confirmed the writes (see the module docstring), else
    :class:`NotReplicated` (after refreshing the client's map of slots, which drops dead replicas)."""
    waits = queue_waits(redis, pipe, keys)
    if not waits:
        return list(await pipe.execute())
    replies = list(await pipe.execute(raise_on_error=False))
    for place, reply in enumerate(replies):
        if isinstance(reply, Exception) and place not in waits:
            raise reply
    short = [node for place, node in waits.items()
             if not isinstance(replies[place], int) or replies[place] < 1]
    if short and isinstance(redis, RedisCluster):
        await redis.nodes_manager.initialize()
        raise NotReplicated(f"no replica of {', '.join(short)} confirmed the writes within "
                            f"{WAIT_TIMEOUT_MS} ms")
    return replies[:min(waits)]
