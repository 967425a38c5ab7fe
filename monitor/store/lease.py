"""A lease in Redis, and the one value its holder may write: how one worker of many is the exporter.

Two keys of one hash slot (so every command here is one slot, on one server or a Redis Cluster):
``lease``, a string holding the holder's token with a time to live, and ``value``, a hash with the
holder's last write (fields ``data``, ``at``, ``fresh``). :meth:`Lease.hold` takes the lease when nobody
holds it (``SET NX PX``, in effect) or renews it for its holder; a holder that stops renewing (killed,
stuck) loses it when its time to live runs out, and the next caller of :meth:`Lease.hold` takes it.
:meth:`Lease.store` writes the value only while the caller holds the lease, and never over a value
whose ``at`` is later (a holder paused past its lease cannot overwrite its successor's newer value).
Reads (:meth:`Lease.read`, :meth:`Lease.freshness`) are one command each.

Each is one ``EVAL`` of a few lines (sent whole: no script cache to lose in a restart or a failover).
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.store.client import RedisClient
from monitor.store.keys import text

HOLD = """
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, ARGV[1]}
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, holder}
end
return {0, holder}
"""
"""``KEYS``: lease; ``ARGV``: token, time to live (ms). Returns (1 if the caller holds it now, holder)."""

STORE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local previous = redis.call('HGET', KEYS[2], 'at')
if previous and tonumber(previous) > tonumber(ARGV[4]) then return -1 end
redis.call('HSET', KEYS[2], 'data', ARGV[3], 'at', ARGV[4], 'fresh', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
"""``KEYS``: lease, value; ``ARGV``: token, the lease's time to live (ms), data, at, fresh, the value's time
to live (ms). Returns 1 (written, the lease renewed), 0 (the caller does not hold the lease) or -1 (a
later value is there)."""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Stored:
    """A value as read back: its bytes, when it was made (``at``) and until when it counts as fresh
    (``fresh``), both wall-clock seconds as its writer gave them."""

    data: bytes
    at: float
    fresh: float


class Lease:
    """The lease ``lease_key`` and the value ``value_key`` (keys of one hash slot) in ``redis``."""

    def __init__(self, redis: RedisClient, lease_key: str, value_key: str) -> None:
        self.redis, self.lease_key, self.value_key = redis, lease_key, value_key

    async def hold(self, token: str, ttl: float) -> tuple[bool, str]:
        """Take the lease if nobody holds it, or renew it if ``token`` does, for ``ttl`` seconds: (whether
        ``token`` holds it now, the holder's token). One command."""
        held, holder = await self.redis.eval(HOLD, 1, self.lease_key, token, _ms(ttl))
        return bool(int(held)), text(holder)

    async def store(self, token: str, ttl: float, data: bytes, at: float, fresh: float, keep: float) -> int:
        """Write ``data`` (made at ``at``, fresh until ``fresh``) if ``token`` holds the lease, renewing it
        for ``ttl`` seconds; the value expires ``keep`` seconds after its last write. 1: written; 0: not the
        holder; -1: the stored value is later than ``at``. One command."""
        written = await self.redis.eval(STORE, 2, self.lease_key, self.value_key,
                                        token, _ms(ttl), data, repr(at), repr(fresh), _ms(keep))
        return int(written)

    async def release(self, token: str) -> bool:
        """Give the lease up if ``token`` holds it (so another caller takes it at once)."""
        return bool(int(await self.redis.eval(RELEASE, 1, self.lease_key, token)))

    async def holder(self) -> str | None:
        """The token holding the lease now, or None."""
        raw = await self.redis.get(self.lease_key)
        return None if raw is None else text(raw)

    async def read(self) -> Stored | None:
        """The value, or None if none was written (or it expired). One command."""
        data, at, fresh = await self.redis.hmget(self.value_key, ["data", "at", "fresh"])
        if data is None or at is None or fresh is None:
            return None
        return Stored(data if isinstance(data, bytes) else data.encode(), float(at), float(fresh))

    async def freshness(self) -> tuple[float, float] | None:
        """(``at``, ``fresh``) of the value without its bytes, or None. One command."""
        at, fresh = await self.redis.hmget(self.value_key, ["at", "fresh"])
        return None if at is None or fresh is None else (float(at), float(fresh))


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
