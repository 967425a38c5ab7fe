"""A flowing run's scenario and its traffic (:mod:`monitor.sim.flow`): what the stream sees, decided before
any engine runs it, so that the stream core and its fold (:mod:`monitor.sim.flow_fold`) are given the same
impressions, deploy events, annotators and look times."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from monitor.core.canary.config import CanaryConfig
from monitor.core.events import Deploy
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.partition import partition_for
from monitor.sim.flow_world import FlowWorld
from monitor.sim.world_math import BoolArray, FloatArray, IntArray

__all__ = ["HOUR", "START_TS", "Annotators", "Flow", "Traffic", "deploys_of", "grade_time", "looks_of",
           "partitions_of", "traffic"]

HOUR = 3600.0
START_TS = 1_763_683_200.0  # 2025-11-21T00:00:00Z: hour 0 of the world's day is 00:00 UTC


@dataclass(frozen=True)
class Annotators:
    """When a request is answered: by one annotator, after a delay drawn per request: within ``minutes``
    (uniform over ``minutes_span`` seconds) with probability ``quick``, within hours (``hours_span``) with
    probability ``slow``, never otherwise."""

    quick: float = 0.7
    slow: float = 0.2
    minutes_span: tuple[float, float] = (300.0, 2700.0)
    hours_span: tuple[float, float] = (3600.0, 6 * 3600.0)

    def __post_init__(self) -> None:
        if not (self.quick >= 0.0 and self.slow >= 0.0 and self.quick + self.slow <= 1.0):
            raise ValueError(f"quick, slow: need shares with a sum ≤ 1, got {self.quick}, {self.slow}")

    def delay(self, rng: np.random.Generator) -> float:
        u = rng.random()
        if u < self.quick:
            return float(rng.uniform(*self.minutes_span))
        if u < self.quick + self.slow:
            return float(rng.uniform(*self.hours_span))
        return math.inf


@dataclass(frozen=True)
class Flow:
    """One scenario (module docstring). Rankers are named as in the :class:`FlowWorld`; the served one is its
    first. ``exchange``: a shadow candidate of weight 1 whose lists are exchanged with the served ones with
    probability 1/2 per session (an exact A/A: both lists' expected values equal for every session)."""

    bucket: str
    hours: float = 24.0
    warm: float = 24.0
    traffic: float = 10.0
    partitions: int = 4
    look: float = 300.0
    shadows: tuple[str, ...] = ()
    exchange: str | None = None
    canary: str | None = None
    share: float = 0.5
    declare_share: bool = False
    deploy: str | None = None
    deploy_minute: float = 5.0
    srm: float = 0.0          # the canary loses this share of its impressions from ``srm_hour`` on
    srm_hour: float = 2.0
    annotators: Annotators = field(default_factory=Annotators)
    stream: StreamConfig = field(default_factory=StreamConfig)
    verdicts: CanaryConfig = field(default_factory=CanaryConfig)

    @property
    def start(self) -> float:
        """The comparison's start (event time): the first hour after the warm-up."""
        return START_TS + self.warm * HOUR


@dataclass(frozen=True)
class Traffic:
    """A run's impressions, in time order (arrays of one element per impression): event time, query and
    outcome (which precomputed session of the query), arm (1: the canary's), served ranker (index in the
    world), variant (0: none, 1: control, 2: canary), whether an exchanged A/A pair is swapped, and the
    partition of its session id (``s<n>``, n = index + 1) by Kafka's partitioner."""

    ts: FloatArray
    query: IntArray
    outcome: IntArray
    ranker: IntArray
    variant: IntArray
    swap: BoolArray
    partition: IntArray

    def __len__(self) -> int:
        return int(self.ts.size)


VARIANTS = (None, "control", "canary")
_PARTITIONS: dict[int, IntArray] = {}


def partitions_of(count: int, partitions: int) -> IntArray:
    """The partition of the session ids ``s1`` … ``s<count>`` (Kafka's murmur2 partitioner; remembered)."""
    known = _PARTITIONS.get(partitions, np.zeros(0, dtype=np.int64))
    if known.size < count:
        more = [partition_for(f"s{n}".encode(), partitions) for n in range(known.size + 1, count + 1)]
        known = _PARTITIONS[partitions] = np.concatenate([known, np.asarray(more, dtype=np.int64)])
    return known[:count]


def traffic(world: FlowWorld, flow: Flow, seed: int) -> Traffic:
    """The impressions of a run (module docstring): a Poisson process at ``traffic`` times the bucket's
    budget per hour, each hour's queries from the world's mix (the canary arm's from its harder mix if it
    has one), outcomes uniform, the canary's share of the comparison's sessions, a deploy's ranker from its
    minute on, and the canary's lost impressions (``srm``) dropped."""
    rng = np.random.default_rng([seed, 42])
    end = flow.start + flow.hours * HOUR
    rate = flow.traffic * flow.stream.budget[flow.bucket] / HOUR
    count = int(rng.poisson(rate * (end - START_TS)))
    ts = np.sort(rng.uniform(START_TS, end, count))
    hour = np.floor((ts - START_TS) / HOUR).astype(np.int64) % 24
    comparing = ts >= flow.start
    canary = None if flow.canary is None else world.index(flow.canary)
    arm = np.zeros(count, dtype=bool)
    if canary is not None:
        arm = comparing & (rng.random(count) < flow.share)
    query = world.world.queries_at(rng, hour)
    if canary is not None and world.rankers[canary].harder and arm.any():
        shifted = world.mixes[world.rankers[canary].harder].queries_at(rng, hour)
        query = np.where(arm, shifted, query)
    outcome = rng.integers(0, world.docs.shape[2], count)
    swap = comparing & (rng.random(count) < 0.5) if flow.exchange is not None else np.zeros(count, dtype=bool)
    ranker = np.zeros(count, dtype=np.int64)
    if flow.deploy is not None:
        ranker[ts >= flow.start + flow.deploy_minute * 60.0] = world.index(flow.deploy)
    variant = np.zeros(count, dtype=np.int64)
    if canary is not None:
        variant[comparing] = 1
        ranker[arm] = canary
        variant[arm] = 2
    keep = np.ones(count, dtype=bool)
    if flow.srm and canary is not None:
        keep = ~(arm & (ts >= flow.start + flow.srm_hour * HOUR) & (rng.random(count) < flow.srm))
    return Traffic(ts[keep], query[keep], outcome[keep], ranker[keep], variant[keep], swap[keep],
                   partitions_of(int(keep.sum()), flow.partitions))


def looks_of(flow: Flow) -> list[float]:
    """The look times of a run: every ``look`` seconds from the comparison's start to its end."""
    return [flow.start + i * flow.look for i in range(1, int(flow.hours * HOUR / flow.look) + 1)]


def deploys_of(world: FlowWorld, flow: Flow) -> list[Deploy]:
    """The run's deploy events: the canary's start, a deploy."""
    out = []
    if flow.canary is not None:
        out.append(Deploy("canary_start", flow.canary, flow.start, previous=world.rankers[0].name,
                          share=flow.share if flow.declare_share else None))
    if flow.deploy is not None:
        out.append(Deploy("deploy", flow.deploy, flow.start + flow.deploy_minute * 60.0,
                          previous=world.rankers[0].name))
    return out


def grade_time(annotators: Annotators, rng: np.random.Generator, asked_at: float) -> float:
    """When a request asked at ``asked_at`` is answered (inf: never)."""
    return asked_at + annotators.delay(rng)
