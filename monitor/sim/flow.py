"""The stream as it flows (issue 42): a realistic world's traffic, its annotators and its verdicts run
through the stream core, looked at as users look at it, every alert counted.

A :class:`Flow` is one scenario of one bucket: ``warm`` hours of traffic served by the served ranker, then
the comparison for ``hours``: a 50/50 (or ``share``) canary, a deploy at minute ``deploy_minute`` of the
comparison's first hour, and/or shadow candidates sent with every impression. Each run (:func:`run`):

* **impressions** arrive at ``traffic`` times the bucket's labelling budget per hour (a Poisson process),
  each searching a query of the world's hourly mix (:mod:`monitor.sim.world`: queries of very different
  difficulty, a mix that follows the clock) and showing one of its precomputed sessions
  (:mod:`monitor.sim.flow_world`): the served list, and the candidates' lists as ``shadow`` lists, twins
  (documents nobody graded yet) included; the bucket is carried (``query_bucket``), partitions as Kafka's
  partitioner routes the session id;
* they go through :class:`~monitor.store.memory.MemoryPipeline` (the embedded default: validation, the
  join, sampling within the budget, windows, epochs: the same core as the Kafka worker) as typed events
  (:meth:`~monitor.store.memory.MemoryPipeline.submit_event`); an impression the core will only count is
  sent without its results (the worker's writer keeps none of them either), decided by the core's own
  sampling rule on the partition's own spend, and checked after the step;
* **annotators** answer the annotation requests the core publishes, as the Label Studio bridge does: one
  task per (query, document) pair never asked before (a pair asked again waits for its first task), a
  request taken by one annotator after a delay of minutes, hours or never (:class:`Annotators`), its
  grades sent as one query-level annotation event (``scope: query``) with the world's grades;
* **looks**: every ``look`` seconds of event time from the comparison's start, the canary comparisons
  (:func:`~monitor.core.canary.pairing.comparisons`) over the pipeline's history and deploys, run through
  an :class:`~monitor.core.canary.alerts.AlertBook` as the worker's alert loop does: every alert that fires
  at any look is counted, with when.

The result (:class:`FlowResult`) holds, per comparison (kind, candidate, metric), its verdict at every look,
the alerts that fired, and per epoch the sessions the budget sampled. Deterministic for a seed.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from monitor.core.canary.alerts import ALERTNAMES, CHECK_ALERTNAMES, AlertBook, AlertConfig
from monitor.core.canary.overall import overall
from monitor.core.canary.pairing import comparisons
from monitor.core.events import Annotation, Deploy, Impression, Label, Result, ShadowList, encode_annotation
from monitor.core.grades import FOUR_LEVEL_SCALE, best_gain
from monitor.core.stream.history import History
from monitor.core.stream.sampling import budget_period, sampled_by
from monitor.core.stream.stats import Stats
from monitor.sim.flow_fold import fold
from monitor.sim.flow_traffic import (
    HOUR,
    START_TS,
    VARIANTS,
    Annotators,
    Flow,
    Traffic,
    deploys_of,
    grade_time,
    looks_of,
    traffic,
)
from monitor.sim.flow_world import FlowWorld
from monitor.sim.records import SimEvent, impression_value
from monitor.store.memory import MemoryPipeline

__all__ = ["HOUR", "START_TS", "Annotators", "Flow", "FlowResult", "Look", "Traffic", "run"]

GRADES = tuple(FOUR_LEVEL_SCALE.parse(level) for level in range(4))


@dataclass(frozen=True)
class Look:
    """One comparison at one look: the verdict code (1 pass, 0 inconclusive, −1 regression), its estimate
    and interval, the sessions, and the checks flagged."""

    at: float
    code: int
    estimate: float | None
    lower: float | None
    upper: float | None
    n_baseline: int
    n_candidate: int
    flagged: tuple[str, ...]


Key = tuple[str, str, str]  # (kind, candidate, metric); metric "overall" for the pair


@dataclass
class FlowResult:
    """What a run saw: per comparison its looks; the alerts fired (alertname, kind, candidate, metric or
    check, first time); the sampled sessions per epoch (group → epoch → sessions sampled)."""

    looks: dict[Key, list[Look]] = field(default_factory=dict)
    alerts: list[tuple[str, str, str, str, float]] = field(default_factory=list)
    sampled: dict[str, dict[int, float]] = field(default_factory=dict)
    impressions: int = 0
    sessions: int = 0
    requests: int = 0
    answered: int = 0
    history: History | None = None  # at the end of the run
    histories: list[tuple[float, History]] = field(default_factory=list)  # each look's, when kept
    events: list[SimEvent] = field(default_factory=list)  # every event given the pipeline, when recorded

    def first(self, key: Key, code: int) -> float | None:
        """When comparison ``key`` first had verdict ``code`` (None: never)."""
        return next((look.at for look in self.looks.get(key, []) if look.code == code), None)

    def last(self, key: Key) -> Look | None:
        found = self.looks.get(key)
        return found[-1] if found else None

    def fired(self, kind: str, candidate: str, what: str | None = None) -> float | None:
        """When the first alert of (kind, candidate) fired, on the metric or check ``what`` (None: any
        regression: ``dcg`` or ``pnr``)."""
        times = [at for _, k, c, w, at in self.alerts
                 if k == kind and c == candidate and (w == what if what is not None else w in ("dcg", "pnr"))]
        return min(times) if times else None


_CODES = {"pass": 1, "inconclusive": 0, "regression": -1}


class Looker:
    """The looks of a run: comparisons over a history, through an alert book, recorded."""

    def __init__(self, flow: Flow, keep: bool = False) -> None:
        config = flow.stream
        self.verdicts = flow.verdicts.with_bounds(config.k, best_gain(FOUR_LEVEL_SCALE)).with_stream(
            config.join_window, config.idle_after)
        self.book = AlertBook(AlertConfig(alpha=self.verdicts.alpha))
        self.result = FlowResult()
        self.keep = keep  # keep a copy of the history of every look (tests: the two engines agree)

    def look(self, at: float, history: History, deploys: list[Deploy]) -> None:
        if self.keep:
            self.result.histories.append((at, frozen(history)))
        found = comparisons(history, deploys, self.verdicts)
        for note in self.book.update(at, found):
            if note.ends_at is None and note.starts_at == at:  # a new alert (not one re-sent)
                labels = note.labels
                name = labels.get("alertname", "")
                check = {v: k for k, v in CHECK_ALERTNAMES.items()}.get(name)
                kind = labels.get("kind") or ("deploy" if name == ALERTNAMES["deploy"] else "canary")
                self.result.alerts.append((name, kind, labels.get("ranker", ""),
                                           check or labels.get("metric", ""), at))
        for c in found:
            v = c.verdict
            flagged = tuple(check.name for check in v.checks if check.flagged)
            self.result.looks.setdefault((c.kind, c.candidate, c.metric), []).append(
                Look(at, _CODES[v.verdict], v.estimate, v.lower, v.upper, v.n_baseline, v.n_candidate,
                     flagged))
        for o in overall(found):
            self.result.looks.setdefault((o.kind, o.candidate, "overall"), []).append(
                Look(at, _CODES[o.verdict], None, None, None, o.n_baseline, o.n_candidate, ()))


def frozen(history: History) -> History:
    """A copy of ``history`` that later changes to its source do not reach."""
    def copied(epochs: Mapping[int, Mapping[str, Stats]]) -> dict[int, dict[str, Stats]]:
        return {i: {g: Stats(s) for g, s in groups.items()} for i, groups in epochs.items()}

    return History(history.width, copied(history.epochs), dict(history.seen), copied(history.queries),
                   history.ended, history.watermark)


class _Run:
    """A run through the stream core (:class:`MemoryPipeline`)."""

    def __init__(self, world: FlowWorld, flow: Flow, seed: int, keep: bool = False,
                 record: bool = False) -> None:
        self.world, self.flow, self.record = world, flow, record
        self.annotator_rng = np.random.default_rng([seed, 43])
        config = flow.stream
        self.pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=flow.partitions, keep=None,
                                       clock=lambda: None)
        self.looker = Looker(flow, keep)
        self.result = self.looker.result
        self.traffic = traffic(world, flow, seed)
        self.asked: set[tuple[str, str]] = set()
        self.pending: list[tuple[float, int, Annotation]] = []
        self.seq = 0
        self.shadows = [world.index(name) for name in flow.shadows]
        self.exchange = None if flow.exchange is None else world.index(flow.exchange)
        self.k = config.k[flow.bucket]
        self.scores = tuple(float(self.k - i) for i in range(self.k))

    def impression(self, n: int) -> tuple[Impression, bool]:
        """The ``n``-th impression (0-based), and whether it was sent without its results (the core will
        only count it)."""
        t, world, flow = self.traffic, self.world, self.flow
        ts, q, j, ranker = float(t.ts[n]), int(t.query[n]), int(t.outcome[n]), int(t.ranker[n])
        sid, variant = f"s{n + 1}", VARIANTS[int(t.variant[n])]
        name = world.rankers[ranker].name
        if not self.record and not self.will_sample(int(t.partition[n]), ts):
            return Impression(sid, self.query(q), name, ts, (), variant, flow.bucket), True
        swap = bool(t.swap[n])
        served = world.shown(ranker, q, j, self.exchange if swap else None)
        shadow = []
        if ts >= flow.start:
            for r in self.shadows:
                if not world.hard[r, q]:
                    docs = world.shown(r, q, j, 0 if swap and r == self.exchange else None)
                    shadow.append(ShadowList(world.rankers[r].name, self.results(q, docs)))
        return Impression(sid, self.query(q), name, ts, self.results(q, served), variant, flow.bucket,
                          tuple(shadow)), False

    def query(self, q: int) -> str:
        return f"{self.flow.bucket}-q{q}"

    def results(self, q: int, docs: list[int]) -> tuple[Result, ...]:
        doc_id, scores = self.world.doc_id, self.scores
        return tuple(Result(doc_id(q, d), i + 1, scores[i]) for i, d in enumerate(docs[:self.k]))

    def will_sample(self, partition: int, ts: float) -> bool:
        """Whether the core will sample this impression: its own rule on the partition's own spend."""
        config = self.flow.stream
        spent = self.pipeline.state[partition].budget.get((self.flow.bucket, budget_period(ts, config)), 0.0)
        return sampled_by(self.flow.bucket, ts, spent, config, self.flow.partitions)

    def requests(self) -> None:
        queue = self.pipeline.requests
        while queue:
            request = queue.popleft()
            self.result.requests += 1
            new = [d for d in request.docs if (request.query, d) not in self.asked]
            if not new:
                continue
            self.asked.update((request.query, d) for d in new)
            at = grade_time(self.flow.annotators, self.annotator_rng, request.ts)
            if math.isinf(at):
                continue
            labels = tuple(Label(d, GRADES[self.level(d)]) for d in new)
            self.seq += 1
            heapq.heappush(self.pending, (at, self.seq, Annotation(labels, query=request.query, ts=at)))

    def level(self, doc_id: str) -> int:
        q, d = doc_id[1:].split("-")
        twin = d.endswith("t")
        index = int(d[:-1] if twin else d)
        return self.world.level(int(q), index + (self.world.world.settings.pool if twin else 0))

    def deliver(self, until: float) -> None:
        while self.pending and self.pending[0][0] <= until:
            _, _, annotation = heapq.heappop(self.pending)
            self.result.answered += 1
            self.submit("annotations", (annotation.query or "").encode(), annotation)
            self.requests()

    def submit(self, topic: str, key: bytes, event: Impression | Annotation | Deploy) -> None:
        """Give the pipeline ``event``; with ``record``, keep it as the record a producer would send."""
        self.pipeline.submit_event(topic, key, event)
        if self.record:
            self.result.events.append(SimEvent(topic, key, encoded(event), event.ts or 0.0))

    def look(self, at: float) -> None:
        deploys = [d for d in self.pipeline.deploys if isinstance(d, Deploy)]
        self.looker.look(at, self.pipeline.history(), deploys)

    def run(self) -> FlowResult:
        flow, pipeline = self.flow, self.pipeline
        looks, events = looks_of(flow), deploys_of(self.world, flow)
        for n in range(len(self.traffic)):
            ts = float(self.traffic.ts[n])
            while looks and looks[0] <= ts:
                at = looks.pop(0)
                self.deliver(at)
                self.look(at)
            self.deliver(ts)
            while events and events[0].ts <= ts:
                deploy = events.pop(0)
                self.submit("deploys", deploy.ranker.encode(), deploy)
            event, counted = self.impression(n)
            self.submit("impressions", event.session_id.encode(), event)
            self.result.impressions += 1
            if counted and event.session_id in pipeline.state[int(self.traffic.partition[n])].records:
                raise AssertionError(f"{event.session_id}: sampled by the core, sent without its results")
            self.requests()
        for at in looks:
            self.deliver(at)
            self.look(at)
        self.result.sessions = round(sum(v for c, v in pipeline.counters.items() if c.name == "sampled"))
        self.result.history = pipeline.history()
        return self.result


def encoded(event: Impression | Annotation | Deploy) -> bytes:
    """The JSON record of an event (schema 1), as a producer sends it."""
    if isinstance(event, Impression):
        def ids(results: tuple[Result, ...]) -> tuple[list[str], list[float]]:
            return [r.doc_id for r in results], [float(r.score or 0.0) for r in results]

        shadow = [(s.ranker, *ids(s.results)) for s in event.shadow]
        return impression_value(event.session_id, event.query, event.query_bucket, event.ranker,
                                event.variant, event.ts, *ids(event.results), shadow)
    if isinstance(event, Annotation):
        return encode_annotation(event)
    body: dict[str, object] = {"type": "deploy", "schema": 1, "kind": event.kind, "ranker": event.ranker,
                               "ts": event.ts}
    if event.previous is not None:
        body["previous"] = event.previous
    if event.share is not None:
        body["share"] = event.share
    return json.dumps(body).encode()


def run(world: FlowWorld, flow: Flow, seed: int, engine: str = "core", keep: bool = False,
        record: bool = False) -> FlowResult:
    """One run of ``flow`` over ``world`` (module docstring): through the stream core (``engine="core"``:
    :class:`MemoryPipeline`), or through its fold of such a run (``"fold"``: :mod:`monitor.sim.flow_fold`,
    the same history at every look, far faster). Both give the same result for a seed."""
    if flow.bucket != world.world.bucket:
        raise ValueError(f"flow.bucket {flow.bucket!r} is not the world's ({world.world.bucket!r})")
    if engine == "core":
        return _Run(world, flow, seed, keep, record).run()
    if record:
        raise ValueError("record: only the core engine sends events")
    if engine != "fold":
        raise ValueError(f"engine: {engine!r} is not one of core, fold")
    rng = np.random.default_rng([seed, 43])
    looker = Looker(flow, keep)
    events = deploys_of(world, flow)
    found = traffic(world, flow, seed)

    def look(at: float, history: History) -> None:
        looker.look(at, history, [d for d in events if d.ts < at])
        looker.result.history = history

    fold(world, flow, found, lambda asked: grade_time(flow.annotators, rng, asked), looks_of(flow), look)
    looker.result.impressions = len(found)
    if looker.result.history is not None:
        looker.result.history = frozen(looker.result.history)
    return looker.result
