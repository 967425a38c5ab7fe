"""The traffic generator: sessions, deploys, labels and malformed records, in delivery-time order.

Session ``i`` of ``n`` happens at ``start_ts + (i + u) × duration_s / n`` (u uniform in [0, 1)), searches a
query drawn from the vocabulary's traffic distribution (which follows the clock with ``night_dip``,
:mod:`monitor.sim.clock`) and is served, in a canary run, by

* the control ranker (``variant: "control"``) before ``canary_ts``, and after it with probability
  ``1 − canary_share``, the share its ``canary_start`` event declares (``share``, when strictly between 0
  and 1);
* the canary ranker (``variant: "canary"``) otherwise; in a regressed bucket it sometimes serves its broken
  list, or (``regression_kind: "irrelevant"``) only irrelevant documents (:mod:`monitor.sim.regression`).

In a deploy run (``deploy_at``) every impression is plain (no ``variant``): the control ranker serves
before ``deploy_ts``, the new ranker (``canary_ranker``, regressed as a canary would be) from then on, and
a ``deploy`` event of the new ranker with ``previous`` the control ranker replaces the ``canary_start``.

Records are generated session by session and released through a heap once no later session can produce
an earlier record (labels may precede their impression by at most ``early_label_max_s``), so
:meth:`Simulation.events` streams a run of any length in ``ts`` order (ties in generation order).

Every random draw comes from a stream of its own (vocabulary, pools, judged queries, traffic, each
ranker's noise, the regression, the annotators, the malformed records), all spawned from ``seed``: the
same seed gives byte-identical records, and changing e.g. ``regression`` leaves the control sessions and
the traffic unchanged.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.sim.annotations import ZH_NAMES, Annotator
from monitor.sim.clock import DailyMix
from monitor.sim.config import SimConfig
from monitor.sim.invalid import KINDS, Bases, malformed
from monitor.sim.queries import Vocabulary, build_vocabulary
from monitor.sim.rankers import FloatArray, Ranker, Ranking
from monitor.sim.records import SimEvent, encode, impression_value
from monitor.sim.regression import RegressionBudget, dcg_of_levels, only_irrelevant
from monitor.sim.relevance import Pools, draw_pools
from monitor.sim.shadow import ShadowRankers, ShadowRanking
from monitor.sim.truth import GroundTruth, SessionTruth, ShadowTruth

_CHUNK = 4096
_STREAMS = ("vocabulary", "pools", "judged", "traffic", "control", "canary", "regression", "labels",
            "invalid", "mix", "shadow", "shadow_labels")
# appended only: a spawned child depends on its index alone


def _ts(event: SimEvent) -> float:
    return event.ts


@dataclass(frozen=True)
class SimResult:
    """A whole run: the records in order and the ground truth (see :class:`GroundTruth`)."""

    config: SimConfig
    events: list[SimEvent]
    sessions: dict[str, SessionTruth]
    session_grades: dict[str, dict[str, int]]
    query_grades: dict[str, dict[str, int]]
    pools: dict[str, dict[str, int]]

    @property
    def valid_events(self) -> list[SimEvent]:
        return [e for e in self.events if e.expected_error is None]

    @property
    def invalid_events(self) -> list[SimEvent]:
        return [e for e in self.events if e.expected_error is not None]


class Simulation:
    """A seeded run: the vocabulary and document pools are drawn once; :meth:`events` replays the traffic."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        children = np.random.SeedSequence(self.config.seed).spawn(len(_STREAMS))
        self._seeds = dict(zip(_STREAMS, children, strict=True))
        self.vocabulary: Vocabulary = build_vocabulary(self.config, self._rng("vocabulary"))
        self.pools: Pools = draw_pools(self.config, self.vocabulary, self._rng("pools"))
        judged = self._rng("judged").random(len(self.vocabulary.texts)) < self.config.query_judgment_share
        self.judged_queries = frozenset(
            q for q in np.flatnonzero(judged).tolist() if self.vocabulary.buckets[q] != "head"
        )
        self.mix: DailyMix | None = (DailyMix(self.config, self.vocabulary, self.pools, self._rng("mix"))
                                     if self.config.night_dip > 0 else None)

    def _rng(self, stream: str) -> np.random.Generator:
        return np.random.default_rng(self._seeds[stream])

    def run(self) -> SimResult:
        """Generate the whole run into memory, with its ground truth."""
        truth = GroundTruth()
        events = list(self.events(truth))
        return SimResult(self.config, events, truth.sessions, truth.session_grades, truth.query_grades,
                         truth.pools)

    def events(self, truth: GroundTruth | None = None) -> Iterator[SimEvent]:
        """The records in delivery-time order; ``truth`` (if given) is filled as sessions are generated."""
        return _Run(self, truth).records()


class _Run:
    """The mutable state of one pass over the traffic."""

    def __init__(self, sim: Simulation, truth: GroundTruth | None) -> None:
        self.sim, self.config, self.truth = sim, sim.config, truth
        cfg = self.config
        self.traffic = sim._rng("traffic")
        self.noise = {"control": sim._rng("control"), "canary": sim._rng("canary")}
        self.regression_rng = sim._rng("regression")
        self.invalid_rng = sim._rng("invalid")
        self.annotator = Annotator(cfg, sim._rng("labels"))
        self.shadow = ShadowRankers(cfg, sim._seeds["shadow"]) if cfg.shadow else None
        self.shadow_annotator = Annotator(cfg, sim._rng("shadow_labels"))
        self.rankers = {"control": Ranker(cfg.control_ranker, cfg.score_weight, cfg.session_noise),
                        "canary": Ranker(cfg.canary_ranker, cfg.score_weight, cfg.session_noise)}
        self.budgets = {bucket: RegressionBudget(cfg.regression) for bucket in ("head", "torso", "tail")}
        self.invalid_odds = cfg.invalid_rate / (1.0 - cfg.invalid_rate)
        self.kinds = sorted(KINDS)
        self.judged_seen: set[int] = set()
        self.pending: list[SimEvent] = []

    def records(self) -> Iterator[SimEvent]:
        cfg, sim = self.config, self.sim
        start, canary_ts = round(cfg.start_ts, 3), round(cfg.canary_ts, 3)
        self.pending.append(SimEvent("deploys", cfg.control_ranker.encode(), encode(
            {"type": "deploy", "schema": 1, "kind": "deploy", "ranker": cfg.control_ranker, "ts": start}),
            start))
        deploy_ts = None if cfg.deploy_ts is None else round(cfg.deploy_ts, 3)
        if deploy_ts is None:
            start_event: dict[str, object] = {"type": "deploy", "schema": 1, "kind": "canary_start",
                                              "ranker": cfg.canary_ranker, "previous": cfg.control_ranker}
            if 0.0 < cfg.canary_share < 1.0:  # the split it serves, declared (a share must be in (0, 1))
                start_event["share"] = cfg.canary_share
            start_event["ts"] = canary_ts
            self.pending.append(SimEvent("deploys", cfg.canary_ranker.encode(), encode(start_event),
                                         canary_ts))
        else:
            self.pending.append(SimEvent("deploys", cfg.canary_ranker.encode(), encode(
                {"type": "deploy", "schema": 1, "kind": "deploy", "ranker": cfg.canary_ranker,
                 "previous": cfg.control_ranker, "ts": deploy_ts}), deploy_ts))
        n = cfg.session_count
        step = cfg.duration_s / n
        width = len(str(n - 1))
        for first in range(0, n, _CHUNK):
            m = min(_CHUNK, n - first)
            times = np.round(cfg.start_ts + (np.arange(first, first + m) + self.traffic.random(m)) * step, 3)
            drawn = (sim.vocabulary.sample(self.traffic, m) if sim.mix is None
                     else sim.mix.sample(self.traffic, times))
            queries = drawn.tolist()
            arm, hint, labelled = self.traffic.random((3, m)).tolist()
            for j, ts in enumerate(times.tolist()):
                if deploy_ts is None:
                    new, variant = ts >= canary_ts and arm[j] < cfg.canary_share, None
                else:
                    new, variant = ts >= deploy_ts, ""
                self.session(f"{cfg.id_prefix}-{first + j:0{width}d}", ts, queries[j], new,
                             hint[j] < cfg.bucket_hint_share, labelled[j] < cfg.label_share, variant)
            # No later session yields a record before its own time minus early_label_max_s.
            yield from self.release(cfg.start_ts + (first + m) * step - cfg.early_label_max_s - 1.0)
        yield from self.release(math.inf)

    def release(self, watermark: float) -> list[SimEvent]:
        """The pending records before ``watermark``, in time order (stable: ties keep generation order)."""
        self.pending.sort(key=_ts)
        cut = bisect.bisect_left(self.pending, watermark, key=_ts)
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def rank(self, query: int, bucket: str, canary: bool) -> tuple[Ranking, bool, FloatArray]:
        """The list shown, whether it is the canary's broken one, and the served ranker's healthy ``z``."""
        cfg, pools = self.config, self.sim.pools
        levels, effects, top_n = pools.levels[query], pools.doc_effects[query], cfg.top_n(bucket)
        arm = "canary" if canary else "control"
        regressed = canary and cfg.regressed(bucket)
        z = self.rankers[arm].latent(levels, effects, self.noise[arm])
        if regressed and cfg.regression_kind == "irrelevant":
            # the whole pool by the same noise draw: its top n is the healthy list, unchanged
            full = self.rankers[arm].order(z, levels.size)
            if self.regression_rng.random() < cfg.regression:
                return only_irrelevant(full, levels, top_n), True, z
            return Ranking(full.indices[:top_n], full.scores[:top_n]), False, z
        ranking = self.rankers[arm].order(z, top_n)
        if not regressed:
            return ranking, False, z
        broken = self.rankers[arm].rank(levels, effects, top_n, self.regression_rng, broken=True)
        k = cfg.label_k(bucket)
        p = self.budgets[bucket].probability(dcg_of_levels(levels[ranking.indices], k),
                                             dcg_of_levels(levels[broken.indices], k))
        if self.regression_rng.random() < p:
            return broken, True, z
        return ranking, False, z

    def session(self, session_id: str, ts: float, query: int, canary: bool, hint: bool, labelled: bool,
                variant: str | None = None) -> None:
        """One session; ``canary``: served by the canary (or newly deployed) ranker; ``variant``: "" for a
        plain impression (deploy runs), None for the canary run's ``control`` / ``canary``."""
        cfg, sim = self.config, self.sim
        bucket, text = sim.vocabulary.buckets[query], sim.vocabulary.texts[query]
        ranking, degraded, z = self.rank(query, bucket, canary)
        pool_ids = sim.pools.doc_ids(query)
        indices = ranking.indices.tolist()
        shown = [pool_ids[x] for x in indices]
        scores = ranking.scores.tolist()
        levels = sim.pools.levels[query][ranking.indices]
        ranker = cfg.canary_ranker if canary else cfg.control_ranker
        if variant is None:
            variant = "canary" if canary else "control"
        key = session_id.encode("utf-8")
        shadows: list[ShadowRanking] = []
        if self.shadow is not None:
            shadows = self.shadow.lists(sim.pools.levels[query], sim.pools.doc_effects[query], z, bucket)
        shadow_lists = [(s.ranker, [pool_ids[x] for x in s.ranking.indices.tolist()],
                         s.ranking.scores.tolist()) for s in shadows]
        self.pending.append(SimEvent("impressions", key, impression_value(
            session_id, text, bucket if hint else None, ranker, variant or None, ts, shown, scores,
            shadow_lists), ts))
        deliveries: list[SimEvent] = []
        grades: dict[str, int] = {}
        if query in sim.judged_queries:
            if query not in self.judged_seen:
                self.judged_seen.add(query)
                deliveries = self.annotator.query(text, pool_ids, sim.pools.levels[query], ts)
                if self.truth is not None:
                    self.truth.query_grades[text] = sim.pools.grades(query)
        elif labelled:
            k = cfg.label_k(bucket)
            deliveries, grades = self.annotator.session(session_id, shown[:k], levels[:k], ts)
            if shadows:  # the rest of the union of the served and shadow top k, from a stream of its own
                extra = self.union_rest(indices[:k], shadows, k)
                if extra:
                    more, extra_grades = self.shadow_annotator.session(
                        session_id, [pool_ids[x] for x in extra], sim.pools.levels[query][extra], ts)
                    deliveries = deliveries + more
                    grades.update(extra_grades)
        self.pending.extend(deliveries)
        if self.invalid_odds > 0:
            impression: dict[str, Any] = {"type": "impression", "schema": 1, "session_id": session_id,
                                          "query": text}
            if hint:
                impression["query_bucket"] = bucket
            impression["ranker"] = ranker
            if variant:
                impression["variant"] = variant
            impression.update({"ts": ts, "results": [
                {"doc_id": d, "position": p, "score": s}
                for p, (d, s) in enumerate(zip(shown, scores, strict=True), start=1)]})
            self.malformed(impression, shown, levels.tolist(), ts, 1 + len(deliveries))
        if self.truth is not None:
            self.truth.sessions[session_id] = SessionTruth(
                session_id, text, bucket, ranker, variant, ts, tuple(shown), tuple(scores),
                tuple(levels.tolist()), hint, degraded, tuple(
                    ShadowTruth(s.ranker, tuple(ids), tuple(values),
                                tuple(sim.pools.levels[query][s.ranking.indices].tolist()), s.degraded)
                    for s, (_, ids, values) in zip(shadows, shadow_lists, strict=True)))
            if grades:
                self.truth.session_grades[session_id] = grades
            if text not in self.truth.pools:
                self.truth.pools[text] = sim.pools.grades(query)

    @staticmethod
    def union_rest(served: list[int], shadows: list[ShadowRanking], k: int) -> list[int]:
        """Pool indices of the shadow lists' top k that the served top k (``served``) lacks, each once, in
        list order: the rest of the union the stream asks annotators for (docs/events.md).

        >>> from monitor.sim.rankers import Ranking
        >>> lists = [ShadowRanking(r, Ranking(np.array(i), np.zeros(len(i))), False)
        ...          for r, i in (("c", [2, 5, 1]), ("d", [7, 5, 0]))]
        >>> _Run.union_rest([1, 2, 3], lists, k=3)
        [5, 7, 0]
        """
        seen = set(served)
        rest: list[int] = []
        for s in shadows:
            for x in s.ranking.indices[:k].tolist():
                if x not in seen:
                    seen.add(x)
                    rest.append(x)
        return rest

    def malformed(self, impression: dict[str, Any], shown: list[str], levels: list[int], ts: float,
                  records: int) -> None:
        """About ``invalid_odds`` malformed records per valid record of the session, at the session's time."""
        rng = self.invalid_rng
        count = int(rng.binomial(records, min(1.0, self.invalid_odds)))
        if count == 0:
            return
        session_id = impression["session_id"]
        head = {"type": "annotation", "schema": 1, "session_id": session_id}
        bases = Bases(
            impression=impression,
            single={**head, "doc_id": shown[0], "grade": ZH_NAMES[levels[0]], "ts": ts},
            batch={**head, "grades": [{"doc_id": d, "grade": ZH_NAMES[g]}
                                      for d, g in zip(shown[:3], levels[:3], strict=True)], "ts": ts},
            deploy={"type": "deploy", "schema": 1, "kind": "deploy", "ranker": impression["ranker"],
                    "ts": ts},
        )
        for _ in range(count):
            bad = malformed(self.kinds[int(rng.integers(len(self.kinds)))], bases, rng)
            self.pending.append(SimEvent(bad.topic, bad.key, bad.value, ts, bad.expected))
