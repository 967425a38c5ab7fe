"""Which sessions of the owned partitions have state in Redis, in memory: most impressions then read nothing.

An impression reads its session's record (a duplicate) and early labels (grades that came first) before its
step. Almost every session has neither: only sampled sessions get a record, and few labels come before their
impression. Reading both keys for every impression (an ``MGET`` of two keys each) is what this index saves:
a partition's batch reads them only for the sessions the index names, and for every annotation.

The index lives in Redis and is kept by the commit itself, atomically with what it indexes: every record a
commit writes is added to the partition's sorted set ``sx`` (score: the record's ``ts``), and the sessions
with early labels are the partition's ``early`` set, which the commit already keeps in arrival order. A
worker reads both once, when a batch of a partition it does not hold yet needs them, and adds its own
commits to what it holds. So what it holds is a superset of the sessions with state, as long as no other
commit reached the partition: the holder remembers the partition's commit counter (``meta`` field ``seq``,
which every fenced commit increments) and a batch that finds another value (a rebalance, another process, a
restore) reads the index again; a commit that fails, a revoked partition and a catch-up forget it.

Bounded: a record leaves ``sx`` (and this index) once its ``ts`` is more than ``state_ttl`` behind the
partition's watermark. An impression of that session with its own ``ts`` is then a dead letter
(``ts_out_of_range``), and the in-process store has forgotten the record by then too
(``PartitionState.prune``). The early sessions are at most ``max_early_sessions`` in Redis; the copy held is
read again once it holds twice that many.

State written before the index (an upgrade) is not in ``sx``: the partition's ``meta`` field ``sxs`` says
from which watermark on its records are indexed (``-1e300``: from the start), and the index is used only once
the watermark is more than ``state_ttl`` past it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.session import SessionRecord
from monitor.store.keys import SEQ

SINCE = "sxs"
"""The ``meta`` field: the watermark from which on the partition's records are indexed."""
FROM_THE_START = "-1e300"
"""``sxs`` of a partition whose records were all written with the index (it had no watermark before)."""


@dataclass
class Held:
    seq: str                                                # the partition's commit counter it is true at
    recorded: dict[str, float] = field(default_factory=dict)  # session → its record's ts
    waiting: set[str] = field(default_factory=set)            # sessions with early labels
    prune_at: int = 1024                                      # prune ``recorded`` when it grows past this


class SessionIndex:
    """The owned partitions' sessions with a record or early labels in Redis (see the module docstring)."""

    def __init__(self, config: StreamConfig) -> None:
        self.ttl = config.state_ttl
        self.max_waiting = 2 * config.max_early_sessions
        self._held: dict[int, Held] = {}

    def trusted(self, since: str | None, watermark: float) -> bool:
        """Whether the partition's records are all indexed (``since``: its ``meta`` field ``sxs``)."""
        return since == FROM_THE_START or (since is not None and float(since) < watermark - self.ttl)

    def before(self, partition: int, meta: Mapping[str, str], watermark: float
               ) -> tuple[Held | None, bool, str | None]:
        """For a batch of ``partition`` whose ``meta`` hash (and ``watermark``) was just read: what is held
        of it (None: every session is read), whether to read the index with the batch, and the ``sxs`` its
        commit writes (the first with the index: from the start if the partition had no watermark, so no
        record, else from that watermark)."""
        since = meta.get(SINCE)
        trusted = self.trusted(since, watermark)
        held = self.sessions(partition, meta.get(SEQ, "")) if trusted else None
        return held, trusted and held is None, meta.get("wm", FROM_THE_START) if since is None else None

    def sessions(self, partition: int, seq: str) -> Held | None:
        """What is held of ``partition`` if it is true at the commit counter ``seq`` (else forgotten)."""
        held = self._held.get(partition)
        if held is not None and held.seq != seq:
            del self._held[partition]
            return None
        return held

    def load(self, partition: int, seq: str, recorded: Iterable[tuple[bytes | str, float]],
             waiting: Iterable[bytes | str]) -> None:
        """The partition's index as read (``ZRANGE sx … WITHSCORES``, ``ZRANGE early``) at ``seq``."""
        held = Held(seq, {_text(s): float(ts) for s, ts in recorded}, {_text(s) for s in waiting})
        held.prune_at = max(1024, 2 * len(held.recorded))
        self._held[partition] = held

    def committed(self, partition: int, fence: str | None, watermark: float | None,
                  records: Iterable[SessionRecord], early: Mapping[str, object]) -> None:
        """A commit of the partition landed: its ``records`` and early-label changes (``None``: dropped);
        ``fence``: the commit counter it was fenced with, which the commit incremented (None: unfenced)."""
        held = self._held.get(partition)
        if held is None:
            return
        if fence is not None:
            held.seq = str(int(fence) + 1 if fence else 1)  # the script's HINCRBY
        for record in records:
            held.recorded[record.session_id] = record.ts
        for session_id, labels in early.items():
            if labels is None:
                held.waiting.discard(session_id)
            else:
                held.waiting.add(session_id)
        if len(held.waiting) > self.max_waiting:  # (Redis evicts beyond max_early_sessions: read it again)
            del self._held[partition]
            return
        if len(held.recorded) > held.prune_at and watermark is not None and math.isfinite(watermark):
            cut = watermark - self.ttl
            held.recorded = {s: ts for s, ts in held.recorded.items() if ts >= cut}
            held.prune_at = max(1024, 2 * len(held.recorded))

    def forget(self, partition: int) -> None:
        self._held.pop(partition, None)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def has_state(held: Held, session_id: str) -> bool:
    """Whether the session may have a record or early labels (it must be read)."""
    return session_id in held.recorded or session_id in held.waiting
