"""The Redis key schema of the worker's state, and how values read back from Redis become text.

Partition keys carry the partition as a Redis Cluster hash tag, ``srm:{p3}:…``, so one partition's
session records (``s:<session>``), early labels (``e:<session>``, and the ``early`` zset of them by
arrival), deadlines (``dl``), aggregate slices (``agg:<window>:<index>``), running totals (``add``,
``rem``), epochs (``ep:<index>``, ``qep:<index>``), ranker spans (``seen``), counters (``cnt``), sketch
(``cmsb:<index>``: u32 counters; ``cms:<index>`` hashes before them), budget (``bud:<period>``),
deploys, outbox and ``meta`` (watermark ``wm``, applied offsets ``off:<topic>``, the commit counter
:data:`SEQ`) live in one slot: one Lua call writes them all atomically. Per-query keys,
``srm:{q:<hash>}:…`` (``labels``, ``label_ts``, ``shared``, ``pending``), are in the query's own slot.
``srm:partitions`` is the set of partitions that hold state (what the readers walk). The rollup of what
``/metrics`` exports, and the exporter's lease, are ``srm:{rollup:<fingerprint>}:…`` (``value``,
``lease``), one slot per fingerprint of the settings it was computed with (:mod:`monitor.worker.rollup`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SEQ = "seq"
"""The ``meta`` field counting a partition's fenced commits (compared and set by the commit script)."""


@dataclass(frozen=True)
class Keys:
    """The keys under one ``prefix`` (``srm`` unless several deployments share a Redis)."""

    prefix: str = "srm"

    @property
    def partitions(self) -> str:
        """The set of partitions that hold state."""
        return f"{self.prefix}:partitions"

    def p(self, partition: int, *parts: object) -> str:
        """A key of ``partition``'s slot: ``srm:{p3}:s:<session>`` for ``p(3, "s", session)``."""
        return ":".join([_slot(self.prefix, partition), *map(str, parts)])

    def q(self, key: str, part: str) -> str:
        """A key of the query whose :func:`~monitor.core.stream.session.query_key` is ``key``."""
        return f"{self.prefix}:{{q:{key}}}:{part}"

    def rollup(self, fingerprint: str, part: str) -> str:
        """A key of the rollup computed with settings ``fingerprint`` (``value`` or ``lease``), both in the
        slot of ``{rollup:<fingerprint>}``."""
        return f"{self.prefix}:{{rollup:{fingerprint}}}:{part}"


@lru_cache(maxsize=4096)
def _slot(prefix: str, partition: int) -> str:
    """``srm:{p3}``, made once per partition (every key of a batch starts with it)."""
    return f"{prefix}:{{p{partition}}}"


def text(value: Any) -> str:
    """A key, field or member as Redis returned it (bytes, unless the client decodes) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
