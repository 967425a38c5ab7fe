"""Realistic traffic for benchmarks and load tests: impressions dominate, a few percent of sessions are labelled.

Every search is an impression (20–40 results, ~1.5 KB); only the sessions the worker's annotation budget
samples get labels, as annotators answer its annotation requests. The budget per bucket and 15 minutes is set so
that about ``sampled_share`` of the sessions are sampled (default 2%), and which sessions those are is not
guessed: the impressions run once through the embedded default (:class:`MemoryPipeline`, the worker's own
core with its partitioner and budget rule), and labels are kept only for the sessions it sampled. No
query-level judgments, so the prediction is
exact for a worker with the same ``[stream]`` settings and partition count that reads each partition in
order. The query mix follows the clock (an 8% night dip), queries come from head, torso and tail
vocabularies whose difficulty differs (the simulator's latent grades), and 20% of impressions carry no
``query_bucket`` (the worker estimates it from its query-frequency sketch).

>>> backlog = RealisticMix(sessions=2000).backlog()
>>> backlog.impressions == 2000 and 0.01 < backlog.sampled / backlog.impressions < 0.04
True
>>> backlog.impression_share > 0.6
True
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.sim import SimConfig, simulate
from monitor.sim.records import SimEvent
from monitor.store.memory import MemoryPipeline

SESSIONS_PER_SECOND = 10.0
"""Event-time sessions per second of the simulated traffic (36,000 an hour)."""
BUDGET_PERIOD = 900.0
"""The budget's period (event seconds): short enough that a backlog of a few thousand seconds spans several."""


@dataclass(frozen=True)
class Backlog:
    """The messages of a realistic run, in delivery order, and what they hold."""

    events: list[SimEvent]
    stream: StreamConfig  # the worker's [stream] settings the labels were chosen for
    sampled: int          # sessions the worker samples (labels come for these only)
    impressions: int

    @property
    def impression_share(self) -> float:
        return self.impressions / max(len(self.events), 1)

    @property
    def mean_bytes(self) -> float:
        return sum(len(e.value) for e in self.events) / max(len(self.events), 1)

    def describe(self) -> str:
        return (f"{len(self.events):,} messages: {self.impressions:,} impressions "
                f"({self.impression_share:.0%} of messages), {self.sampled:,} sessions sampled and labelled "
                f"({self.sampled / max(self.impressions, 1):.1%}), {self.mean_bytes:,.0f} bytes per message "
                "on average")


@dataclass(frozen=True)
class RealisticMix:
    """The settings of a realistic backlog: ``sessions`` impressions at :data:`SESSIONS_PER_SECOND`,
    about ``sampled_share`` of them sampled, over ``partitions`` partitions."""

    sessions: int = 10_000
    sampled_share: float = 0.02
    partitions: int = 4
    seed: int = 11
    night_dip: float = 0.08
    base: StreamConfig = field(default_factory=lambda: StreamConfig(variants=("control", "canary", "probe")))

    def sim(self) -> SimConfig:
        return SimConfig(seed=self.seed, n_sessions=self.sessions,
                         duration_s=self.sessions / SESSIONS_PER_SECOND, night_dip=self.night_dip,
                         query_judgment_share=0.0, label_share=1.0, invalid_rate=0.0)

    def stream(self) -> StreamConfig:
        """The worker's settings: the budget per bucket and period that samples ``sampled_share`` of a
        period's sessions of each bucket."""
        sim = self.sim()
        per_period = SESSIONS_PER_SECOND * min(BUDGET_PERIOD, sim.duration_s)  # a short run: its sessions
        budget = {b: max(1.0, round(self.sampled_share * per_period * sim.share(b), 1))
                  for b in ("head", "torso", "tail")}
        return replace(self.base, budget=budget, budget_period=BUDGET_PERIOD)

    def stream_toml(self) -> str:
        """The ``[stream]`` block of the worker's settings for :meth:`stream`."""
        budget = self.stream().budget
        variants = ", ".join(f'"{v}"' for v in self.base.variants)
        return ("[stream]\nbudget = { " + ", ".join(f"{b} = {budget[b]:g}" for b in ("head", "torso", "tail"))
                + f" }}\nbudget_period = {BUDGET_PERIOD:g}\n" + f"variants = [{variants}]\n")

    def backlog(self) -> Backlog:
        """The simulated run with labels only for the sessions the worker samples."""
        stream = self.stream()
        events = simulate(self.sim()).events
        pipeline = MemoryPipeline(stream, FOUR_LEVEL_SCALE, self.partitions, clock=lambda: None)
        for event in events:
            if event.topic != "annotations":
                pipeline.submit(event.topic, event.key, event.value)
        sampled = {r.session_id.encode() for r in pipeline.requests}
        kept = [e for e in events if e.topic != "annotations" or e.key in sampled]
        impressions = sum(1 for e in kept if e.topic == "impressions")
        return Backlog(kept, stream, len(sampled), impressions)
