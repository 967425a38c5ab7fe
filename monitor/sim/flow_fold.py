"""The stream core's fold of a flowing run, session by session and vectorised: the history
:class:`~monitor.store.memory.MemoryPipeline` holds at every look of a run of :mod:`monitor.sim.flow`,
computed from the run's traffic and annotators without stepping every event, so that a benchmark can run
the hundreds of runs per cell the verdicts' error rates need (a run through the pipeline takes minutes).

It is the join's rules for the sessions of such a run, restated for them, and only for what the verdicts
read (the epochs' sessions, DCG, PNR and paired sums, sampled sessions, impressions; the per-query DCG
of the adjustment for query difficulty; the rankers' sightings). ``tests/unit/test_flow_fold.py`` checks
it against the pipeline: the same runs give the same history at every look (every field to 1e-9) and the
same verdicts. The rules (:mod:`monitor.core.stream.join`):

* **sampling**: the core's own rule (:func:`~monitor.core.stream.sampling.sampled_by`) on each partition's
  spend in the budget's period (sessions mode), its choices found for all impressions at once and each
  checked with the rule;
* **requests**: a sampled session asks for the documents of the union of its lists without a grade at its
  impression (grades that came before it); a pair asked before is not asked again (the annotators'
  bridge), and a request's new pairs are graded together, at the time :func:`~monitor.sim.flow.grade_time`
  draws in the order the pipeline publishes the requests;
* **closing**: a session whose union is graded at its impression is scored then; otherwise it waits until
  its union is graded (scored) or until its partition's first impression at or after its deadline (the
  join window after its impression), when it is scored if its served top k has ``min_coverage`` of its
  grades, else expired; a grade that comes before an impression of the same time is delivered first;
* **after**: every later grade of a document of its lists re-scores it (an expired session becomes scored
  once its coverage reaches the minimum): DCG@k with the ungraded documents at gain 0 and the pairs among
  the graded ones, and each shadow list reaching the minimum coverage paired with the served one.

A change at a grade's time enters the look at or after it, one at an impression's time the first look after
it (the driver's order: a look before the impression of its time). Sessions mode only; quiet partitions
never close a session here (a run's partitions all receive traffic every second).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.core.stream.history import History, epoch_of, see
from monitor.core.stream.sampling import sampled_by
from monitor.core.stream.session import group_key, query_key
from monitor.core.stream.shadow import FOOTING_FIELDS, paired_fields, sent_fields, shadow_group
from monitor.core.stream.stats import Stats
from monitor.sim.flow_traffic import Flow, Traffic
from monitor.sim.flow_world import FlowWorld
from monitor.sim.world_math import measures

__all__ = ["fold"]


def parsed(cells: dict[str, Stats]) -> list[tuple[str, str, str, float, float, float]]:
    """One epoch's per-query cells (of one bucket) as :attr:`History.query_rows` holds them, parsed by it."""
    found = History(1.0, {}, {}, {0: cells}).query_rows
    return [row for by_epoch in found.values() for row in by_epoch.get(0, [])]


def forget(memo: dict[str, Any], bucket: str, changed: set[int], covariates: bool) -> None:
    """Drop from a memo carried from look to look (and from the memos of its :meth:`History.until` views)
    what :mod:`monitor.core.canary.covariates` derived from the epochs that ``changed`` (and everything
    derived from the covariates when ``covariates``: an epoch of their window changed)."""
    for cache in (memo, *(v for k, v in memo.items() if k.startswith("until:"))):
        if covariates:
            cache.pop("covariates", None)
            cache.pop("covariate_sums", None)
        grouped, sums, covariate = (cache.get(name, {}) for name in ("rows", "query_sums", "covariate_sums"))
        for index in changed:
            grouped.pop((bucket, index), None)
            sums.pop(index, None)
            covariate.pop(index, None)


Look = Callable[[float, History], None]
SERVED = ("sessions", "dcg", "dcg_sq", "concordant", "discordant", "pnr_con_sq", "pnr_neg_sq", "pnr_con_neg")


class _Session:
    __slots__ = ("arrivals", "close", "epoch", "group", "index", "n", "query", "served", "shadows", "ts")

    def __init__(self, n: int, ts: float, query: int, group: str, served: list[int],
                 shadows: list[tuple[str, list[int] | None]], epoch: int) -> None:
        self.n, self.ts, self.query, self.group, self.epoch = n, ts, query, group, epoch
        self.served, self.shadows = served, shadows
        self.arrivals: list[float] = []  # per document of the union (served, then the shadows' new ones)
        self.index: list[list[int]] = []  # per list, each rank's document's place in ``arrivals``
        self.close = math.inf
        self.index = []


def fold(world: FlowWorld, flow: Flow, traffic: Traffic, grade_time: Callable[[float], float],
         looks: list[float], look: Look) -> None:
    """Run ``traffic`` (a :class:`~monitor.sim.flow.Traffic` of ``flow``, a :class:`~monitor.sim.flow.Flow`)
    through the fold, calling ``look(at, history)`` at each look time with the history the pipeline would
    hold then; ``grade_time(asked_at)`` answers each request (called in the pipeline's order)."""
    _Fold(world, flow, traffic, grade_time, looks, look).run()


class _Fold:
    def __init__(self, world: FlowWorld, flow: Flow, traffic: Traffic, grade_time: Callable[[float], float],
                 looks: list[float], look: Look) -> None:
        self.world, self.flow, self.t, self.grade_time = world, flow, traffic, grade_time
        self.looks, self.look = np.asarray(looks, dtype=np.float64), look
        config = flow.stream
        if config.budget_unit != "sessions":
            raise ValueError("the fold follows sessions mode only")
        self.config = config
        self.bucket: str = flow.bucket
        self.k = config.k[self.bucket]
        self.pool = world.world.settings.pool
        self.shadow_rankers = [world.index(name) for name in flow.shadows]
        exchange = flow.exchange
        self.exchange = None if exchange is None else world.index(exchange)
        self.start: float = flow.start
        # what changes at each look: (look index) -> list of (epoch, key, stats delta) and sightings
        self.epoch_deltas: dict[int, list[tuple[int, str, dict[str, float]]]] = defaultdict(list)
        self.query_deltas: dict[int, list[tuple[int, str, dict[str, float]]]] = defaultdict(list)
        self.sightings: dict[int, list[tuple[str, str, float]]] = defaultdict(list)
        self._keys: dict[int, str] = {}

    def at(self, t: float, impression: bool) -> int:
        """The index of the first look that sees a change at ``t`` (``len(looks)``: none)."""
        if impression:
            return int(np.searchsorted(self.looks, t, side="right"))
        return int(np.searchsorted(self.looks, t, side="left"))

    # -- sampling, requests and grades --------------------------------------------------------------------
    def chosen(self) -> list[int]:
        """The impressions the core samples, in time order: per partition and budget period, the i-th
        sampled is the first impression after the (i − 1)-th whose :func:`allowance` exceeds i (it grows
        with time within a period), found for all i at once; each one, and the impression just before it,
        checked with the core's own rule (:func:`sampled_by`), which makes them the rule's choices."""
        t, config, bucket = self.t, self.config, self.bucket
        partitions = self.flow.partitions
        share = config.budget[bucket] / partitions
        out: list[np.ndarray] = []
        for p in range(partitions):
            where = np.flatnonzero(t.partition == p)
            ts = t.ts[where]
            position = ts / config.budget_period
            period = np.floor(position)
            allowed = np.minimum(share, share * (position - period) + 1.0)  # allowance(), per impression
            bounds = np.flatnonzero(np.r_[True, period[1:] != period[:-1], True])
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                spent = np.arange(math.ceil(share))
                first = a + np.searchsorted(allowed[a:b], spent, side="right")  # allowance > i from here
                picked = np.maximum.accumulate(first - spent) + spent  # and after the one before
                picked = picked[picked < b]
                for i, j in enumerate(picked.tolist()):
                    if not sampled_by(bucket, float(ts[j]), float(i), config, partitions) or (
                            j > a and (i == 0 or j - 1 > picked[i - 1])
                            and sampled_by(bucket, float(ts[j - 1]), float(i), config, partitions)):
                        raise AssertionError(f"the fold's sampling left the core's rule at impression "
                                             f"{where[j]}")
                out.append(where[picked])
        return sorted(np.concatenate(out).tolist()) if out else []

    def sample(self) -> list[_Session]:
        t, world = self.t, self.world
        grades: dict[tuple[int, int], float] = {}  # (query, doc) -> when its grade comes (inf: never)
        out: list[_Session] = []
        names = [r.name for r in world.rankers]
        variants = (None, "control", "canary")
        width = self.config.epoch
        for n in self.chosen():
            ts = float(t.ts[n])
            q, j, ranker = int(t.query[n]), int(t.outcome[n]), int(t.ranker[n])
            swap = bool(t.swap[n])
            served = world.shown(ranker, q, j, self.exchange if swap else None)[:self.k]
            shadows = []  # one per shadow ranker; None where none was sent
            for r in self.shadow_rankers:
                docs = None
                if ts >= self.start and not world.hard[r, q]:
                    docs = world.shown(r, q, j, 0 if swap and r == self.exchange else None)[:self.k]
                shadows.append((names[r], docs))
            variant = variants[int(t.variant[n])] or "control"
            session = _Session(n, ts, q, group_key(self.bucket, names[ranker], variant), served, shadows,
                               epoch_of(ts, width))
            union = list(dict.fromkeys([*served, *(d for _, docs in shadows for d in docs or ())]))
            new = [d for d in union if (q, d) not in grades]
            if new:
                answer = self.grade_time(ts)
                for d in new:
                    grades[(q, d)] = answer
            session.arrivals = [grades[(q, d)] for d in union]
            place = {d: i for i, d in enumerate(union)}
            session.index = [[place[d] for d in docs or ()] for docs in (served, *(ds for _, ds in shadows))]
            out.append(session)
        self.grades = grades
        return out

    def close(self, sessions: list[_Session]) -> None:
        """Each session's close: the first impression of its partition at or after its deadline."""
        t = self.t
        by_partition = {p: t.ts[t.partition == p] for p in np.unique(t.partition)}
        window = self.config.join_window
        for s in sessions:
            times = by_partition[int(t.partition[s.n])]
            i = int(np.searchsorted(times, s.ts + window, side="left"))
            s.close = float(times[i]) if i < times.size else math.inf

    # -- contributions ---------------------------------------------------------------------------------
    def contributions(self, sessions: list[_Session]) -> None:
        """Each session's contribution at each time it changes (vectorised over every session's changes),
        as deltas summed per look, epoch and group."""
        minimum = self.config.min_coverage
        owner: list[int] = []  # per row: the session's place in ``sessions``
        times: list[float] = []
        impression: list[bool] = []
        complete: list[bool] = []
        for i, s in enumerate(sessions):
            union_done = max(s.arrivals, default=-math.inf)
            if union_done <= s.ts:  # graded at its impression: scored then
                first, at_impression, done = s.ts, True, True
            elif union_done <= s.close:  # its last grade completes it before its close
                first, at_impression, done = union_done, False, True
            elif math.isfinite(s.close):  # closed: scored if its served list is covered enough, else expired
                first, at_impression, done = s.close, True, False
            else:
                continue  # still waiting at the end of the run
            later = sorted({a for a in s.arrivals if first < a < math.inf})
            owner.extend([i] * (1 + len(later)))
            times.extend([first, *later])
            impression.extend([at_impression] + [False] * len(later))
            complete.extend([done] + [False] * len(later))
        if not owner:
            return
        row, when = np.asarray(owner), np.asarray(times)
        levels, graded, lengths = self._lists(sessions, row, when)
        dcg, _, neg, con = measures(levels, graded)  # (rows, lists): ungraded at gain 0, pairs among graded
        covered = np.where(lengths > 0, graded.sum(axis=2) / np.maximum(lengths, 1), 0.0)
        first_row = np.r_[True, row[1:] != row[:-1]]
        # scored from the row that completes it or covers its served list enough on (it stays scored)
        status = np.asarray(complete) | (covered[:, 0] >= minimum)
        segment = np.cumsum(first_row) - 1
        status = np.maximum.accumulate(status + 2 * segment) - 2 * segment >= 1
        x, c, d = dcg[:, 0], con[:, 0], neg[:, 0]
        served = np.stack([np.ones_like(x), x, x * x, c, d, c * c, d * d, c * d], axis=1) * status[:, None]
        served = np.concatenate([served, (~status)[:, None].astype(np.float64)], axis=1)
        look = np.where(np.asarray(impression), np.searchsorted(self.looks, when, side="right"),
                        np.searchsorted(self.looks, when, side="left"))

        def change(values: np.ndarray) -> np.ndarray:
            out = values.copy()
            out[~first_row] -= values[:-1][~first_row[1:]]
            return out

        epochs = np.asarray([sessions[i].epoch for i in owner])
        groups = [sessions[i].group for i in owner]
        self._sum(look, epochs, groups, change(served), (*SERVED, "expired"), self.epoch_deltas)
        ts = np.asarray([sessions[i].ts for i in owner])
        discount = 1.0 / np.log2(np.arange(self.k) + 2.0)
        shown = np.arange(self.k)[None, None, :] < lengths[:, :, None]
        waiting = ((~graded & shown) * discount).sum(axis=2)  # (rows, lists): footing_fields' masses
        given = ((graded & shown) * discount).sum(axis=2)
        for slot, (name, _) in enumerate(sessions[0].shadows, start=1):
            sent = status & np.asarray([sessions[i].shadows[slot - 1][1] is not None for i in owner])
            present = sent & (lengths[:, slot] > 0) & (covered[:, slot] >= minimum)
            fields = sent_fields(x) | paired_fields(x, dcg[:, slot], (c, d), (con[:, slot], neg[:, slot]))  # type: ignore[arg-type]
            fields |= dict(zip(FOOTING_FIELDS, (waiting[:, 0], given[:, 0], waiting[:, slot], given[:, slot]),
                               strict=True))
            mask = np.asarray([sent if f.startswith("sent_") else present for f in fields]).T
            values = np.stack([np.broadcast_to(v, x.shape) for v in fields.values()], axis=1) * mask
            present = sent
            group = shadow_group(self.bucket, name)
            self._sum(look, epochs, [group] * len(owner), change(values), tuple(fields), self.epoch_deltas)
            for i in np.unique(look[present]).tolist():
                at = present & (look == i)
                self.sightings[i].extend([("shadow", name, float(ts[at].min())),
                                          ("shadow", name, float(ts[at].max()))])
        query = change(np.stack([status.astype(np.float64), x * status, x * x * status], axis=1))
        keys = [f"{g}|{self._query_key(sessions[i].query)}" for g, i in zip(groups, owner, strict=True)]
        self._sum(look, epochs, keys, query, ("n", "x", "xx"), self.query_deltas)

    def _query_key(self, query: int) -> str:
        key = self._keys.get(query)
        if key is None:
            key = self._keys[query] = query_key(f"{self.bucket}-q{query}")
        return key

    @staticmethod
    def _sum(look: np.ndarray, epochs: np.ndarray, keys: list[str], values: np.ndarray,
             fields: tuple[str, ...], into: dict[int, list[tuple[int, str, dict[str, float]]]]) -> None:
        """The rows' changes summed per (look, epoch, key), into the deltas of each look."""
        names = sorted(set(keys))
        index = {k: i for i, k in enumerate(names)}
        key = np.asarray([index[k] for k in keys])
        span = int(epochs.max()) + 1
        cell = (look * span + epochs) * len(names) + key
        found, inverse = np.unique(cell, return_inverse=True)
        sums = np.zeros((found.size, values.shape[1]))
        np.add.at(sums, inverse, values)
        for f, total in zip(found.tolist(), sums.tolist(), strict=True):
            delta = {name: v for name, v in zip(fields, total, strict=True) if v != 0.0}
            if delta:
                rest, k = divmod(f, len(names))
                i, epoch = divmod(rest, span)
                into[i].append((epoch, names[k], delta))

    def _lists(self, sessions: list[_Session], row: np.ndarray, when: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row and list (served, then each shadow slot): grades in rank order, which are graded by the
        row's time, and the list's length (each session's lists laid out once)."""
        slots, k, pool = 1 + len(self.shadow_rankers), self.k, self.pool
        width = max(len(s.arrivals) for s in sessions) + 1
        arrivals = np.full((len(sessions), width), np.inf)  # the last column: an empty slot's
        levels = np.zeros((len(sessions), slots, k), dtype=np.int64)
        index = np.full((len(sessions), slots, k), width - 1, dtype=np.int64)
        lengths = np.zeros((len(sessions), slots), dtype=np.int64)
        world_levels = self.world.world.levels
        for i, s in enumerate(sessions):
            arrivals[i, :len(s.arrivals)] = s.arrivals
            for slot, (docs, places) in enumerate(zip((s.served, *(ds or [] for _, ds in s.shadows)), s.index,
                                                      strict=True)):
                lengths[i, slot] = len(docs)
                if docs:
                    d = np.asarray(docs)
                    levels[i, slot, :len(docs)] = world_levels[s.query, np.where(d >= pool, d - pool, d)]
                    index[i, slot, :len(docs)] = places
        graded = np.take_along_axis(arrivals[row], index[row].reshape(row.size, -1), axis=1).reshape(
            row.size, slots, k) <= when[:, None, None]
        return levels[row], graded, lengths[row]

    # -- the looks --------------------------------------------------------------------------------------
    def run(self) -> None:
        sessions = self.sample()
        self.close(sessions)
        self.contributions(sessions)
        t, world, width = self.t, self.world, self.config.epoch
        names = [r.name for r in world.rankers]
        variants = ("control", "control", "canary")
        # each impression's group and (arm, ranker), as small integers
        kinds = sorted({(int(r), int(v)) for r, v in zip(t.ranker.tolist(), t.variant.tolist(), strict=True)})
        kind = np.searchsorted(np.asarray([r * 3 + v for r, v in kinds]), t.ranker * 3 + t.variant)
        groups = [group_key(self.bucket, names[r], variants[v]) for r, v in kinds]
        arms = [("canary" if v == 2 else "plain", names[r]) for r, v in kinds]
        epoch = np.floor(t.ts / width).astype(np.int64)
        impression_look = np.searchsorted(self.looks, t.ts, side="right")
        sampled = np.zeros(len(t), dtype=bool)
        sampled[[s.n for s in sessions]] = True
        epochs: dict[int, dict[str, Stats]] = {}
        queries: dict[int, dict[str, Stats]] = {}
        seen: dict[tuple[str, str], tuple[float, float]] = {}
        rows: dict[str, dict[int, list[tuple[str, str, str, float, float, float]]]] = {}
        memo: dict[str, Any] = {}
        parsed_cells: dict[int, dict[str, tuple[str, str, str, float, float, float]]] = {}  # epoch: key: row
        first = epoch_of(self.start, width)  # every covariate window ends at or before it
        start = 0
        for i in range(len(self.looks) + 1):
            end = int(np.searchsorted(impression_look, i, side="right"))
            if end > start:
                part = slice(start, end)
                for field, mask in (("impressions", None), ("sampled", sampled[part])):
                    keys = epoch[part] * len(kinds) + kind[part]
                    found, counts = np.unique(keys if mask is None else keys[mask], return_counts=True)
                    for key, count in zip(found.tolist(), counts.tolist(), strict=True):
                        by_group = epochs.setdefault(key // len(kinds), {})
                        cell = by_group.setdefault(groups[key % len(kinds)], Stats())
                        cell[field] = cell.get(field, 0.0) + float(count)
                for j in np.unique(kind[part]).tolist():
                    times = t.ts[part][kind[part] == j]
                    arm, ranker = arms[j]
                    see(seen, arm, ranker, float(times[0]), float(times[-1]))
            start = end
            for index, key, delta in self.epoch_deltas.get(i, ()):
                epochs.setdefault(index, {}).setdefault(key, Stats()).add(delta)
            touched: dict[int, dict[str, None]] = {}
            for index, key, delta in self.query_deltas.get(i, ()):
                queries.setdefault(index, {}).setdefault(key, Stats()).add(delta)
                touched.setdefault(index, {})[key] = None
            for index, cells in touched.items():  # History.query_rows of the cells that changed, parsed again
                by_key = parsed_cells.setdefault(index, {})
                by_key.update(zip(cells, parsed({key: queries[index][key] for key in cells}), strict=True))
                rows.setdefault(self.bucket, {})[index] = list(by_key.values())
            changed = set(touched)
            forget(memo, self.bucket, changed, bool(changed) and min(changed) < first)
            for arm, ranker, ts in self.sightings.get(i, ()):
                see(seen, arm, ranker, ts)
            if i < len(self.looks):
                history = History(width, epochs, seen, queries)
                # what History would derive from its queries (each look's the same, kept up to date here
                # rather than parsed afresh), and the covariates of periods whose window did not change
                history.__dict__["query_rows"], history.__dict__["memo"] = rows, memo
                self.look(float(self.looks[i]), history)
