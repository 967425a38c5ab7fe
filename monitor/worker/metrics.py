"""Pipeline-health series of one worker process (next to the shared relevance series).

``search_relevance_events_total{topic}`` and ``search_relevance_consumer_lag{topic, partition}`` are this
process's own (sum them across workers: each partition is consumed by one worker at a time);
``search_relevance_waiting_sessions`` and ``search_relevance_redis_memory_bytes`` are read from the shared
Redis (take one worker's value, or ``max``).
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
    waiting: int
    redis_memory: int
    redis_retries: int = 0
    quiet_closed: int = 0
    processing_retries: int = 0
    stage_cpu: Mapping[str, float] = field(default_factory=dict)  # stage → CPU seconds (RedisState.cpu)


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
        families["waiting_sessions"].add_metric([], view.waiting)
        families["redis_memory_bytes"].add_metric([], view.redis_memory)
        families["redis_retries"].add_metric([], view.redis_retries)
        families["quiet_closes"].add_metric([], view.quiet_closed)
        families["processing_retries"].add_metric([], view.processing_retries)
        for stage, seconds in sorted(view.stage_cpu.items()):
            families["worker_cpu_seconds"].add_metric([stage], seconds)
        yield from families.values()
