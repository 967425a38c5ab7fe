"""What the steps of the join add to the shared aggregates, folded in one place: the rolling-window slices,
the totals added and taken back, the canary history's epochs and per-query epochs, the rankers'
sightings, the counters and the deploys. Each store only applies an :class:`Aggregates`: the in-process
one keeps one per partition (``monitor/store/memory.py``), the Redis one encodes a batch's as one
atomic commit (``monitor/store/batch.py``, ``apply.lua``) with each key's expiry from
:class:`Retention`; in process, :meth:`Aggregates.prune` forgets what no reader needs by event time.

A step's :class:`~monitor.core.stream.transition.Delta` says whether it adds a contribution or takes one
back (``take_back``, set by the join when a session that contributed is scored or expired again; never
guessed from the numbers): a take-back is summed, positive, into ``removed`` and subtracted from the
slices and epochs, which so hold the signed sum (added − taken back).

A new per-session statistic is a new field of :func:`~monitor.core.stream.stats.session_stats`: it flows
through here, the stores and the Lua commit unchanged (sums of named fields), and only its exporter
needs to know it.

>>> from monitor.core.stream.stats import Stats
>>> from monitor.core.stream.transition import Delta, Transition
>>> a, contribution = Aggregates(), Stats({"sessions": 1.0, "dcg": 2.0})
>>> a.add(Transition(0.0, deltas=[Delta(10.0, "tail|r|control", contribution)]), StreamConfig())
>>> a.add(Transition(0.0, deltas=[Delta(10.0, "tail|r|control", contribution, take_back=True)]),
...       StreamConfig())
>>> a.added["tail|r|control"], a.removed["tail|r|control"], a.epochs[0]["tail|r|control"]["dcg"]
({'sessions': 1.0, 'dcg': 2.0}, {'sessions': 1.0, 'dcg': 2.0}, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from monitor.core.events import Deploy
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter
from monitor.core.stream.history import Seen, epoch_of, prune_epochs, prune_seen, see
from monitor.core.stream.lean import Counted
from monitor.core.stream.stats import Stats
from monitor.core.stream.transition import Delta, Transition
from monitor.core.stream.window_merge import SliceKey, slice_keys, wanted_slices

Grouped = dict[str, Stats]  # group (or group|query key) -> its field sums


def _held(into: Grouped, group: str) -> Stats:
    stats = into.get(group)
    if stats is None:
        stats = into[group] = Stats()
    return stats


def _fold(into: Grouped, delta: Delta) -> None:
    """The signed sum: ``delta``'s stats added, or subtracted if it takes them back."""
    if delta.take_back:
        _held(into, delta.group).take_back(delta.stats)
    else:
        _held(into, delta.group).add(delta.stats)


@dataclass
class Aggregates:
    """The shared aggregates' increments (module docstring): ``slices`` (window, slice index) → group →
    sums; ``added`` and ``removed`` group → cumulative sums (a take-back, ``Delta.take_back``, is summed,
    positive, into ``removed``); ``epochs`` epoch → group → sums (and each group's ``impressions`` and
    ``sampled`` sessions);
    ``query_epochs`` epoch → ``group|query key`` → n, x, xx; ``seen`` (arm, ranker) → first and last
    time; ``counters`` :class:`~monitor.core.stream.counters.Counter` → count; ``deploys`` in arrival
    order."""

    slices: dict[SliceKey, Grouped] = field(default_factory=dict)
    added: Grouped = field(default_factory=dict)
    removed: Grouped = field(default_factory=dict)
    epochs: dict[int, Grouped] = field(default_factory=dict)
    query_epochs: dict[int, Grouped] = field(default_factory=dict)
    seen: Seen = field(default_factory=dict)
    counters: dict[Counter, float] = field(default_factory=dict)
    deploys: list[Deploy] = field(default_factory=list)

    def add(self, t: Transition, config: StreamConfig) -> None:
        """Fold in what the step ``t`` adds."""
        for delta in t.deltas:
            for where in slice_keys(delta.ts, config):
                _fold(self.slices.setdefault(where, {}), delta)
            _held(self.removed if delta.take_back else self.added, delta.group).add(delta.stats)
            _fold(self.epochs.setdefault(epoch_of(delta.ts, config.epoch), {}), delta)
        if config.query_history:
            for delta in t.query_deltas:
                _fold(self.query_epochs.setdefault(epoch_of(delta.ts, config.epoch), {}), delta)
        if t.impression is not None:
            ts, group = t.impression
            self._impression(epoch_of(ts, config.epoch), group, t.sampled)
        if t.seen is not None:
            see(self.seen, *t.seen)
        for sighting in t.sightings:
            see(self.seen, *sighting)
        for counter, amount in t.counters:
            self.count(counter, amount)
        self.deploys.extend(t.deploys)

    def add_counted(self, counted: Counted) -> None:
        """:meth:`add` of an impression the step only counts (the lean path of most traffic), without
        its transition: the same sightings, counter and epoch impressions."""
        see(self.seen, *counted.seen)
        self._impression(counted.epoch, counted.group)
        self.count(Counter("impressions", counted.group))

    def _impression(self, epoch: int, group: str, sampled: bool = False) -> None:
        groups = self.epochs.get(epoch)
        if groups is None:
            groups = self.epochs[epoch] = {}
        stats = groups.get(group)
        if stats is None:
            stats = groups[group] = Stats()
        stats["impressions"] = stats.get("impressions", 0.0) + 1.0
        if sampled:
            stats["sampled"] = stats.get("sampled", 0.0) + 1.0

    def count(self, counter: Counter, amount: float = 1.0) -> None:
        self.counters[counter] = self.counters.get(counter, 0.0) + amount

    def prune(self, watermark: float, config: StreamConfig) -> None:
        """Forget what no reader needs any more at ``watermark`` (event time): slices no window reads,
        epochs and sightings older than ``history`` (:class:`Retention`, the in-process store's
        expiry)."""
        if not math.isfinite(watermark):
            return
        oldest: dict[str, int] = {}
        for window, index in wanted_slices(watermark, config):
            oldest[window] = min(index, oldest.get(window, index))
        for key in [k for k in self.slices if k[1] < oldest.get(k[0], k[1])]:
            del self.slices[key]
        prune_epochs(self.epochs, watermark, config.epoch, config.history)
        prune_epochs(self.query_epochs, watermark, config.epoch, config.history)
        prune_seen(self.seen, watermark, config.history)


@dataclass(frozen=True)
class Retention:
    """How long the shared state is kept in Redis, in seconds, from the stream's settings: the expiry the
    commit sets on each key (in process, :meth:`Aggregates.prune` forgets by event time instead)."""

    config: StreamConfig

    def slice(self, window: str) -> float:
        """A window's slice: the window, and two slices' width of margin."""
        return self.config.windows[window] + 2 * self.config.slice_width(window)

    @property
    def epoch(self) -> float:
        """An epoch of the canary history (and of the per-query history): ``history`` and two epochs."""
        return self.config.history + 2 * self.config.epoch

    @property
    def sketch(self) -> float:
        """A slice of the query-frequency sketch: two frequency windows."""
        return self.config.frequency_window * 2

    @property
    def budget(self) -> float:
        """A budget period's spend: two periods."""
        return self.config.budget_period * 2

    @property
    def session(self) -> float:
        """A session's record and its early labels: ``state_ttl``."""
        return self.config.state_ttl
