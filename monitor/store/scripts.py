"""The Lua scripts the worker runs in Redis, and the encodings of what they read and write.

The scripts are package data (``monitor/store/lua/*.lua``), read here once:

* :data:`APPLY_OPS` (``apply.lua``): every write of one partition's commit in one atomic call, encoded by
  :class:`Ops`, fenced by the partition's commit counter;
* :data:`SHARED_MERGE` (``shared_merge.lua``): one grading session's grades merged into its query's shared
  grades (read back with :func:`parse_shared`);
* :data:`QUERY_MERGE` (``query_merge.lua``): a query annotation's grades merged into the query's
  judgments, the latest ``ts`` winning.

Also the stored form of a session's early labels (:func:`early_json`, :func:`parse_early`).

Each script is called by SHA and loaded again where Redis lost it (a restart, a promoted replica). A
Redis Cluster's pipeline refuses redis-py's ``evalsha``, so there :class:`Script` queues the raw
``EVALSHA`` command after loading the script on every primary once; a node that lacks it all the same
(a replica promoted since) makes :meth:`Scripts.execute` raise :class:`ScriptsMissing`, a connection
error the worker waits out (the batch is tried again, the scripts loaded again first).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import msgspec
from redis.asyncio.cluster import ClusterPipeline
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from monitor.core.stream.held_grades import Labels, SharedGrades, Stamps, merge_shared
from monitor.store.client import RedisClient, RedisPipeline, execute_replicated
from monitor.store.keys import text


def _script(name: str) -> str:
    return files("monitor.store").joinpath("lua", name).read_text(encoding="utf-8")


APPLY_OPS = _script("apply.lua")
"""The writes of one commit: ``ARGV[1]`` is :attr:`Ops.ops` in MessagePack, then :attr:`Ops.values`;
``KEYS`` is :attr:`Ops.keys`."""

SHARED_MERGE = _script("shared_merge.lua")
"""One session's grades into a query's ``shared`` hash; returns the documents it is now the earliest of."""

QUERY_MERGE = _script("query_merge.lua")
"""A query annotation's grades into its ``labels`` and ``label_ts``; returns the documents whose grade won."""


class Ops:
    """The writes of one commit as a list for :data:`APPLY_OPS`: ``[name, key index, args...]``. Large
    values (session records, early labels, outbox entries, deploys) and the sketch's ``BITFIELD``
    arguments are not in the list: they follow it as ``ARGV[2..]`` (:meth:`value` and :meth:`span` give
    the indices an op names), so the script neither decodes nor builds them."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.ops: list[list[str | int]] = []
        self.values: list[str | bytes] = []
        self._index: dict[str, int] = {}

    def add(self, name: str, key: str, *args: str) -> None:
        index = self._index.get(key)
        if index is None:
            self.keys.append(key)
            index = self._index[key] = len(self.keys)
        self.ops.append([name, index, *args])

    def value(self, value: str | bytes) -> str:
        """Pass ``value`` beside the ops; the index of ``ARGV`` that holds it, for an op's argument."""
        self.values.append(value)
        return str(len(self.values) + 1)  # ARGV[1] is the ops

    def span(self, values: Sequence[str]) -> tuple[str, str]:
        """Pass ``values`` beside the ops, in order: the first and last index of ``ARGV`` that hold them
        (arguments the script hands to one command as they are, without building them in Lua)."""
        first = len(self.values) + 2
        self.values.extend(values)
        return str(first), str(len(self.values) + 1)


def early_json(labels: Labels, stamps: Stamps) -> bytes:
    """A session's early labels as stored: the grades, or ``[grades, their ts]`` when some had a ts
    (compact JSON by msgspec; json's, which writes a non-finite ts as ``Infinity``, if one ever was)."""
    value = [labels, stamps] if stamps else labels
    if all(map(math.isfinite, stamps.values())):
        return _JSON.encode(value)
    return json.dumps(value).encode()


def parse_early(raw: str | bytes) -> tuple[Labels, Stamps]:
    """:func:`early_json` read back (a plain mapping: stored before the ts, or without any)."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:  # (Infinity, as json writes it)
        value = json.loads(raw)
    if isinstance(value, list):
        return value[0], value[1]
    return value, {}


_JSON = msgspec.json.Encoder()


def parse_shared(stored: Mapping[bytes | str, bytes | str]) -> SharedGrades:
    """A query's ``shared`` hash (:data:`SHARED_MERGE`: MessagePack, or JSON as stored before) as the core
    reads it."""
    return {text(doc): {origin: (float(ts), int(level)) for origin, ts, level in _entries(raw)}
            for doc, raw in stored.items()}


class LazyShared(MutableMapping[str, SharedGrades]):
    """Queries' shared grades as read, each parsed (:func:`parse_shared`) only when a step asks for it: a
    batch reads them for every query an impression of it may be sampled for, and most of those are not
    sampled (then nothing reads them, and a head query's hash is large)."""

    def __init__(self) -> None:
        self._parsed: dict[str, SharedGrades] = {}
        self._raw: dict[str, Mapping[bytes | str, bytes | str]] = {}

    def hold(self, key: str, stored: Mapping[bytes | str, bytes | str]) -> None:
        """The query's ``shared`` hash as Redis returned it."""
        self._parsed.pop(key, None)
        self._raw[key] = stored

    def __getitem__(self, key: str) -> SharedGrades:
        stored = self._raw.pop(key, None)
        if stored is not None:
            self._parsed[key] = parse_shared(stored)
        return self._parsed[key]

    def __setitem__(self, key: str, value: SharedGrades) -> None:
        self._raw.pop(key, None)
        self._parsed[key] = value

    def __delitem__(self, key: str) -> None:
        if self._raw.pop(key, None) is None:
            del self._parsed[key]

    def __contains__(self, key: object) -> bool:
        return key in self._raw or key in self._parsed

    def __iter__(self) -> Iterator[str]:
        yield from list(self._parsed)
        yield from list(self._raw)

    def __len__(self) -> int:
        return len(self._parsed) + len(self._raw)


def _entries(raw: bytes | str) -> list[tuple[str, str, int]]:
    data = raw.encode() if isinstance(raw, str) else raw
    return json.loads(data) if data[:1] == b"[" else msgspec.msgpack.decode(data)  # type: ignore[no-any-return]


def merged_shared(entries: SharedGrades, write: tuple[str, str, float, Labels]) -> SharedGrades:
    """``entries`` with one session's grades merged (a new mapping; ``entries`` is left as it is)."""
    _, origin, ts, labels = write
    out = dict(entries)
    for doc, level in labels.items():
        out[doc] = merge_shared(out.get(doc, {}), origin, ts, level)[0]
    return out


class ScriptsMissing(RedisConnectionError):
    """A cluster node answered NOSCRIPT in a pipeline: the scripts are loaded again before the next try."""


@dataclass(frozen=True)
class Script:
    """One script registered with a client. Called without ``client`` or with a plain pipeline it runs by
    SHA (redis-py loads it where Redis answers NOSCRIPT); queued in a cluster pipeline, as a raw
    ``EVALSHA`` once the script is loaded on every primary (``loaded``)."""

    registered: AsyncScript
    loaded: list[bool] = field(default_factory=lambda: [False])

    async def __call__(self, keys: Sequence[str], args: Sequence[str | bytes | int | float],
                       client: RedisPipeline | None = None) -> Any:
        if isinstance(client, ClusterPipeline):
            if not self.loaded[0]:
                await client.cluster_client.script_load(self.registered.script)  # on every primary
                self.loaded[0] = True
            return client.execute_command("EVALSHA", self.registered.sha, len(keys), *keys, *args)
        return await self.registered(keys=keys, args=args, client=client)


@dataclass(frozen=True)
class Scripts:
    """The scripts registered with one client (one server or a cluster)."""

    apply_ops: Script
    shared_merge: Script
    query_merge: Script

    @classmethod
    def register(cls, redis: RedisClient) -> Scripts:
        return cls(*(Script(redis.register_script(script))
                     for script in (APPLY_OPS, SHARED_MERGE, QUERY_MERGE)))

    async def execute(self, redis: RedisClient, pipe: RedisPipeline, keys: Sequence[str]) -> list[Any]:
        """:func:`~monitor.store.client.execute_replicated` for a pipeline that may call these scripts
        (``keys``: those it writes, none for a read); on a cluster node without them,
        :class:`ScriptsMissing` (they are loaded again at the next call)."""
        try:
            return await execute_replicated(redis, pipe, keys)
        except NoScriptError as error:
            for script in (self.apply_ops, self.shared_merge, self.query_merge):
                script.loaded[0] = False
            raise ScriptsMissing(f"a node lacked a script ({error}); loading them again") from error
