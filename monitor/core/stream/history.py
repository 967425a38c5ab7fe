"""What the canary comparisons read: net session statistics and impressions per event-time epoch, and
when each ranker was first and last seen.

Every session delta the join emits (``Transition.deltas``: a ``Delta`` of event time, group and stats, added
or, marked ``take_back``, subtracted) is also summed, signed, into the epoch that holds its session's time:
epoch ``e = floor(ts / width)`` covers ``[e·width, (e+1)·width)`` (``StreamConfig.epoch``, 15 minutes by
default). So the statistics of the sessions of a period (since a canary started, the day before a deploy)
are a sum of epochs, exact to one epoch at each end, and they are kept for ``StreamConfig.history`` (7
days), not forever. Sums are order-free, so every partition, worker and replay gets the same epochs.

Every impression the stream counts (declared, not a duplicate; sampled or not: ``Transition.impression``)
also adds 1 to the field ``impressions`` of its group in the epoch of its own time: the canary's
sample-ratio check compares the arms' impressions with the share the canary declared. So a group's epoch
may hold ``impressions`` and no session statistics (none of its impressions sampled); an undeclared
impression or a duplicate adds nothing there.

Every counted impression also reports its ranker, its arm (``canary`` for the canary variant,
``plain`` for control or none) and its time; :class:`Seen` keeps the first and the last time per
(arm, ranker): minimum and maximum, order-free again. That is how a ranker version that appears in the
impressions without a deploy event is detected (``monitor.core.canary.pairing``).

>>> h = History(3600.0, {0: {"tail|a|control": {"sessions": 2.0}}, 1: {"tail|a|control": {"sessions": 3.0}}})
>>> h.totals(1)["tail|a|control"]["sessions"], h.totals()["tail|a|control"]["sessions"]
(3.0, 5.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from monitor.core.stream.session import split_group
from monitor.core.stream.stats import Stats

ARMS = ("plain", "canary")
Seen = dict[tuple[str, str], tuple[float, float]]  # (arm, ranker) -> (first ts, last ts)


def epoch_of(ts: float, width: float) -> int:
    return math.floor(ts / width)


def arm_of(variant: str) -> str:
    """``canary`` for the canary variant, ``plain`` for control and for no variant."""
    return "canary" if variant == "canary" else "plain"


def see(into: Seen, arm: str, ranker: str, first: float, last: float | None = None) -> None:
    """Widen the (first, last) interval of ``(arm, ranker)`` to cover ``first`` … ``last``."""
    last = first if last is None else last
    old = into.get((arm, ranker))
    into[(arm, ranker)] = (first, last) if old is None else (min(old[0], first), max(old[1], last))


def merge_seen(parts: Iterable[Mapping[tuple[str, str], tuple[float, float]]]) -> Seen:
    out: Seen = {}
    for part in parts:
        for (arm, ranker), (first, last) in part.items():
            see(out, arm, ranker, first, last)
    return out


@dataclass(frozen=True)
class History:
    """``epochs``: epoch index → group (``bucket|ranker|variant``) → net stats of its sessions and
    ``impressions``, its impressions counted in the epoch (those loaded: a reader may load only the
    epochs it needs); ``seen``: (arm, ranker) → (first, last) time;
    ``queries``: epoch index → ``group|query key`` → the DCG of that query's scored sessions in it, ``n``,
    ``x`` (Σ DCG), ``xx`` (Σ DCG²): what the canary's adjustment for query difficulty reads
    (``StreamConfig.query_history``; empty without it, and the comparisons are then unadjusted)."""

    width: float
    epochs: Mapping[int, Mapping[str, Stats]]
    seen: Mapping[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    queries: Mapping[int, Mapping[str, Stats]] = field(default_factory=dict)
    ended: bool = False  # the stream ended (a replay's end): no epoch will receive another session
    watermark: float = -math.inf  # the stream's event time: its latest impression, declared or not

    def epoch(self, ts: float) -> int:
        return epoch_of(ts, self.width)

    @cached_property
    def memo(self) -> dict[str, Any]:
        """Values derived from this history by its readers (one evaluation's comparisons share them)."""
        return {}

    @cached_property
    def query_rows(self) -> dict[str, dict[int, list[tuple[str, str, str, float, float, float]]]]:
        """``queries`` parsed once: bucket → epoch → (ranker, variant, query key, n, Σx, Σx²) rows (every
        comparison of an evaluation reads them, so the keys are split once, not once per comparison)."""
        out: dict[str, dict[int, list[tuple[str, str, str, float, float, float]]]] = {}
        for index, keys in self.queries.items():
            for key, stats in keys.items():
                group, query = split_query(key)
                bucket, ranker, variant = split_group(group)
                out.setdefault(bucket, {}).setdefault(index, []).append(
                    (ranker, variant, query, stats.get("n", 0.0), stats.get("x", 0.0), stats.get("xx", 0.0)))
        return out

    @property
    def latest(self) -> float:
        """The stream's latest event time: the last sighting of any ranker, or the :attr:`watermark` if
        later (impressions only counted, of an undeclared ranker or variant, move time on too; −inf:
        none)."""
        return max(self.watermark, max((last for _, last in self.seen.values()), default=-math.inf))

    def open_sessions(self, bucket: str) -> dict[int, int]:
        """Epoch → the sampled sessions of ``bucket`` still open in it (waiting for grades, not yet
        scored or expired): ``sampled − sessions − expired`` over its served groups, where it is not 0.
        Epochs written before ``sampled`` was counted read as having none."""
        out: dict[int, int] = {}
        for index, groups in self.epochs.items():
            count = 0.0
            for group, stats in groups.items():
                if group.startswith(bucket + "|") and "sampled" in stats:
                    count += stats["sampled"] - stats.get("sessions", 0.0) - stats.get("expired", 0.0)
            if round(count) > 0:
                out[index] = round(count)
        return out

    def settled(self, bucket: str, grace: float) -> int | None:
        """The last epoch of ``bucket`` a verdict may read (None: every epoch held): every epoch up to it
        has ended by :attr:`latest` and has no open session, or ended ``grace`` seconds before
        :attr:`latest` (past it, an epoch is read even if a session of it never closed: a partition that
        stopped). So a look never reads a session whose grades are still awaited, nor an epoch only part
        of whose sessions are in (the first to be scored are those graded already: not a fair sample).
        Once the stream :attr:`ended` (a replay's end: every session closed), every epoch is read."""
        latest = math.inf if self.ended else self.latest
        if latest == -math.inf:
            return None
        waiting = self.open_sessions(bucket)

        def unsettled(index: int) -> bool:
            end = (index + 1) * self.width
            return end + grace > latest and (end > latest or index in waiting)

        found = [i for i in self.epochs if unsettled(i)]
        return min(found) - 1 if found else None

    def until(self, last: int | None) -> History:
        """This history without the epochs after ``last`` (None: itself). What its readers derived from this
        one carries over: :attr:`query_rows`, if parsed already, without the later epochs, and a memo of
        its own kept in this one's (one per ``last``), so the views of one evaluation share their work."""
        if last is None:
            return self
        view = History(self.width, {i: g for i, g in self.epochs.items() if i <= last}, self.seen,
                       {i: q for i, q in self.queries.items() if i <= last}, self.ended, self.watermark)
        if "query_rows" in self.__dict__:
            view.__dict__["query_rows"] = {bucket: {i: rows for i, rows in by_epoch.items() if i <= last}
                                           for bucket, by_epoch in self.query_rows.items()}
        view.__dict__["memo"] = self.memo.setdefault(f"until:{last}", {})
        return view

    def totals(self, first: int | None = None, last: int | None = None) -> dict[str, Stats]:
        """Group → the sum of the epochs ``first`` … ``last`` (inclusive; None: unbounded)."""
        out: dict[str, Stats] = {}
        for index, groups in self.epochs.items():
            if (first is not None and index < first) or (last is not None and index > last):
                continue
            for group, stats in groups.items():
                out.setdefault(group, Stats()).add(stats)
        return out


def add_epoch(epochs: dict[int, dict[str, Stats]], ts: float, width: float, group: str,
              delta: Mapping[str, float]) -> None:
    epochs.setdefault(epoch_of(ts, width), {}).setdefault(group, Stats()).add(delta)


def split_query(key: str) -> tuple[str, str]:
    """``group|query key`` → (group, query key)."""
    group, _, query = key.rpartition("|")
    return group, query


def prune_epochs(epochs: dict[int, dict[str, Stats]], watermark: float, width: float,
                 keep: float) -> None:
    """Forget the epochs that ended more than ``keep`` seconds before ``watermark``."""
    oldest = epoch_of(watermark - keep, width)
    for index in [i for i in epochs if i < oldest]:
        del epochs[index]


def prune_seen(seen: Seen, watermark: float, keep: float) -> None:
    """Forget rankers not seen for ``keep`` seconds (what is forgotten is never compared again)."""
    for key in [k for k, (_, last) in seen.items() if last < watermark - keep]:
        del seen[key]
