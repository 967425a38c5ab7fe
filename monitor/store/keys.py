"""The Redis key schema of the worker's state, and how values read back from Redis become text.

Partitions are laid out in :attr:`Keys.groups` groups (``MONITOR_REDIS_GROUPS``, 4 unless set): partition
``N`` is in group ``N mod groups``, and every key of a group carries it as a Redis Cluster hash tag,
``srm:{g3}:…``, so one Lua call can write a partition's keys and its group's totals atomically.

A partition's own keys, ``srm:{g<G>}:p<N>:…``: session records (``s:<session>``, and the ``sx`` zset of them
by their ``ts``: :mod:`monitor.store.session_index`), early labels (``e:<session>``, and the ``early`` zset
of them by arrival), deadlines (``dl``), sketch (``cmsb:<index>``: u32 counters; ``cms:<index>`` hashes
before them), budget (``bud:<period>``), outbox and ``meta`` (watermark ``wm``, applied offsets
``off:<topic>``, the commit counter :data:`SEQ`, the watermark from which on ``sx`` is complete ``sxs``).

The group's totals, ``srm:{g<G>}:…``, summed over its partitions in the same commits: aggregate slices
(``agg:<window>:<index>``), running totals (``add``, ``rem``), epochs (``ep:<index>``, ``qep:<index>``),
ranker spans (``seen``, minimum and maximum), counters (``cnt``), deploys and ``meta`` (the largest
watermark ``wm``, the sessions waiting for their deadline ``waiting``). What a rollup reads is these, a
fixed number of keys whatever the partitions (:mod:`monitor.store.reader`).

Per-query keys, ``srm:{q:<hash>}:…`` (``labels``, ``label_ts``, ``shared``, ``pending``), are in the
query's own slot. ``srm:partitions`` is the set of partitions that hold state; ``srm:layout`` records the
number of groups the state was written with (:meth:`Keys.check_layout`). The rollup of what ``/metrics``
exports, and the exporter's lease, are ``srm:{rollup:<fingerprint>}:…`` (``value``, ``lease``), one slot per
fingerprint of the settings it was computed with (:mod:`monitor.worker.rollup`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

DEFAULT_GROUPS = 4
"""Groups of partitions unless ``MONITOR_REDIS_GROUPS`` says otherwise: what a rollup reads is this many
groups' totals (docs/scaling.md, "The rollup"); a Redis Cluster spreads the writes over this many slots."""

SEQ = "seq"
"""The ``meta`` field counting a partition's fenced commits (compared and set by the commit script)."""


@dataclass(frozen=True)
class Keys:
    """The keys under one ``prefix`` (``srm`` unless several deployments share a Redis)."""

    prefix: str = "srm"
    groups: int = DEFAULT_GROUPS

    @property
    def partitions(self) -> str:
        """The set of partitions that hold state."""
        return f"{self.prefix}:partitions"

    @property
    def layout(self) -> str:
        """The hash recording the layout the state was written with (``groups``)."""
        return f"{self.prefix}:layout"

    def group(self, partition: int) -> int:
        """The group ``partition`` is in."""
        return partition % self.groups

    def p(self, partition: int, *parts: object) -> str:
        """A key of ``partition``'s own: ``srm:{g3}:p7:s:<session>`` for ``p(7, "s", session)``, 4 groups."""
        return ":".join([_slot(self.prefix, partition, self.groups), *map(str, parts)])

    def g(self, group: int, *parts: object) -> str:
        """A key of ``group``'s totals: ``srm:{g3}:agg:1h:<index>`` for ``g(3, "agg", "1h", index)``."""
        return ":".join([f"{self.prefix}:{{g{group}}}", *map(str, parts)])

    def t(self, partition: int, *parts: object) -> str:
        """A key of the totals of ``partition``'s group (in the partition's hash slot)."""
        return self.g(self.group(partition), *parts)

    def q(self, key: str, part: str) -> str:
        """A key of the query whose :func:`~monitor.core.stream.session.query_key` is ``key``."""
        return f"{self.prefix}:{{q:{key}}}:{part}"

    def rollup(self, fingerprint: str, part: str) -> str:
        """A key of the rollup computed with settings ``fingerprint`` (``value`` or ``lease``), both in the
        slot of ``{rollup:<fingerprint>}``."""
        return f"{self.prefix}:{{rollup:{fingerprint}}}:{part}"


@lru_cache(maxsize=4096)
def _slot(prefix: str, partition: int, groups: int) -> str:
    """``srm:{g3}:p7``, made once per partition (every key of a batch starts with it)."""
    return f"{prefix}:{{g{partition % groups}}}:p{partition}"


def text(value: Any) -> str:
    """A key, field or member as Redis returned it (bytes, unless the client decodes) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
