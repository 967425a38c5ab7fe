"""Pipeline-health series of one worker process (next to the shared relevance series).

``search_relevance_events_total{topic}`` and ``search_relevance_consumer_lag{topic, partition}`` are this
process's own (sum them across workers: each partition is consumed by one worker at a time);
``search_relevance_waiting_sessions`` and ``search_relevance_redis_memory_bytes`` are read from the shared
Redis, through the rollup (take one worker's value, or ``max``). :class:`RollupCollector`: the rollup every
worker exports (:mod:`monitor.worker.rollup`): when it was computed, its age at this scrape, how long it
took; and whether this worker is the exporter, and how many rollups it computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class PipelineView:
    consumed: Mapping[str, int]
    lag: Mapping[tuple[str, int], int]
    waiting: int | None  # None: not known (no rollup yet)
    redis_memory: int | None
    redis_retries: int = 0
    quiet_closed: int = 0
    processing_retries: int = 0
    label_waits: int = 0  # impressions held back for their partition's labels (monitor/worker/consumer.py)
    stage_cpu: Mapping[str, float] = field(default_factory=dict)  # stage → CPU seconds (RedisState.cpu)
    exporter: bool = False  # this worker holds the exporter's lease (monitor/worker/rollup_lease.py)
    rollups_computed: int = 0  # rollups it computed and stored


class PipelineCollector(Collector):
    def __init__(self, source: Callable[[], PipelineView], prefix: str = "search_relevance") -> None:
        self.source, self.prefix = source, prefix

    def describe(self) -> Iterator[Metric]:
        """Every family :meth:`collect` yields (names, types, labels, in its order) without samples and
        without reading the source: what a registry checks for name clashes when this is registered."""
        yield from self._families().values()

    def _families(self) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        """The empty families, keyed by name without the prefix, in the order they are exported."""
        def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{self.prefix}_{name}", doc, labels=labels)

        def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
            return CounterMetricFamily(f"{self.prefix}_{name}", doc, labels=labels)

        return {
            "events": counter("events", "Messages consumed by this worker, per topic", ["topic"]),
            "consumer_lag": gauge("consumer_lag", "Messages behind the log end, per partition this worker "
                                  "consumes", ["topic", "partition"]),
            "waiting_sessions": gauge("waiting_sessions", "Sampled sessions waiting in the join for labels "
                                      "(all partitions)", []),
            "redis_memory_bytes": gauge("redis_memory_bytes", "Redis used_memory", []),
            "redis_retries": counter("redis_retries", "Messages retried by this worker because Redis was "
                                     "unreachable", []),
            "quiet_closes": counter("quiet_closes", "Sessions this worker closed because their partition had "
                                    "no impression for idle_timeout (docs/worker.md, quiet partitions)", []),
            "processing_retries": counter("processing_retries", "Messages this worker tried again alone "
                                          "after an unexpected failure (not Redis unreachable); one failing "
                                          "every attempt is a processing_error dead letter", []),
            "label_waits": counter("label_waits", "Times this worker held a partition's impressions back "
                                   "until its annotations were read up to their time, so that no session "
                                   "closes before the labels produced with it (docs/worker.md)", []),
            "worker_cpu_seconds": counter("worker_cpu_seconds", "CPU seconds this worker spent in the "
                                          "synchronous stages of its batches: decode (validation), join "
                                          "(the steps: sampling, scoring, aggregates), encode (the commit's "
                                          "writes); the rest of process_cpu_seconds_total is Kafka, the "
                                          "Redis client and the event loop", ["stage"]),
        }

    def collect(self) -> Iterator[Metric]:
        view = self.source()
        families = self._families()
        for topic, count in sorted(view.consumed.items()):
            families["events"].add_metric([topic], count)
        for (topic, partition), behind in sorted(view.lag.items()):
            families["consumer_lag"].add_metric([topic, str(partition)], behind)
        if view.waiting is not None:
            families["waiting_sessions"].add_metric([], view.waiting)
        if view.redis_memory is not None:
            families["redis_memory_bytes"].add_metric([], view.redis_memory)
        families["redis_retries"].add_metric([], view.redis_retries)
        families["quiet_closes"].add_metric([], view.quiet_closed)
        families["processing_retries"].add_metric([], view.processing_retries)
        families["label_waits"].add_metric([], view.label_waits)
        for stage, seconds in sorted(view.stage_cpu.items()):
            families["worker_cpu_seconds"].add_metric([stage], seconds)
        yield from families.values()


@dataclass(frozen=True)
class RollupView:
    """The rollup a scrape read (``at``, ``took``: None when there was none), the scrape's wall-clock time,
    and this worker's part: whether it holds the exporter's lease, how many rollups it computed."""

    at: float | None
    took: float | None
    now: float
    exporter: bool
    computed: int


class RollupCollector(Collector):
    def __init__(self, source: Callable[[], RollupView], prefix: str = "search_relevance") -> None:
        self.source, self.prefix = source, prefix

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` yields, without samples and without reading the source."""
        yield from self._families().values()

    def _families(self) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        p = self.prefix
        return {
            "timestamp": GaugeMetricFamily(f"{p}_rollup_timestamp_seconds", "When the reads of the rollup "
                                           "this scrape exports began (Unix seconds, the exporter's clock)",
                                           labels=[]),
            "age": GaugeMetricFamily(f"{p}_rollup_age_seconds", "Seconds from then to this scrape: how old "
                                     "the relevance and canary series are", labels=[]),
            "duration": GaugeMetricFamily(f"{p}_rollup_duration_seconds", "Seconds the exporter took to "
                                          "compute that rollup", labels=[]),
            "exporter": GaugeMetricFamily(f"{p}_rollup_exporter", "1 if this worker holds the exporter's "
                                          "lease (it computes the rollup), else 0", labels=[]),
            "computed": CounterMetricFamily(f"{p}_rollups_computed", "Rollups this worker computed and "
                                            "stored as the exporter", labels=[]),
        }

    def collect(self) -> Iterator[Metric]:
        view = self.source()
        families = self._families()
        if view.at is not None:
            families["timestamp"].add_metric([], view.at)
            families["age"].add_metric([], max(view.now - view.at, 0.0))
        if view.took is not None:
            families["duration"].add_metric([], view.took)
        families["exporter"].add_metric([], 1.0 if view.exporter else 0.0)
        families["computed"].add_metric([], view.computed)
        yield from families.values()
