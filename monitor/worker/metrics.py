"""Pipeline-health series of one worker process (next to the shared relevance series).

``search_relevance_events_total{topic}`` and ``search_relevance_consumer_lag{topic, partition}`` are this
process's own (sum them across workers: each partition is consumed by one worker at a time);
``search_relevance_waiting_sessions`` and ``search_relevance_redis_memory_bytes`` are read from the shared
Redis (take one worker's value, or ``max``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

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


class PipelineCollector(Collector):
    def __init__(self, source: Callable[[], PipelineView], prefix: str = "search_relevance") -> None:
        self.source, self.prefix = source, prefix

    def collect(self) -> Iterator[Metric]:
        view = self.source()
        consumed = CounterMetricFamily(f"{self.prefix}_events", "Messages consumed by this worker, per topic",
                                       labels=["topic"])
        for topic, count in sorted(view.consumed.items()):
            consumed.add_metric([topic], count)
        yield consumed
        lag = GaugeMetricFamily(f"{self.prefix}_consumer_lag",
                                "Messages behind the log end, per partition this worker consumes",
                                labels=["topic", "partition"])
        for (topic, partition), behind in sorted(view.lag.items()):
            lag.add_metric([topic, str(partition)], behind)
        yield lag
        yield GaugeMetricFamily(f"{self.prefix}_waiting_sessions",
                                "Sampled sessions waiting in the join for labels (all partitions)",
                                value=view.waiting)
        yield GaugeMetricFamily(f"{self.prefix}_redis_memory_bytes", "Redis used_memory",
                                value=view.redis_memory)
        yield CounterMetricFamily(f"{self.prefix}_redis_retries",
                                  "Messages retried by this worker because Redis was unreachable",
                                  value=view.redis_retries)
        yield CounterMetricFamily(f"{self.prefix}_quiet_closes",
                                  "Sessions this worker closed because their partition had no impression for "
                                  "idle_timeout (docs/worker.md, quiet partitions)", value=view.quiet_closed)
        yield CounterMetricFamily(f"{self.prefix}_processing_retries",
                                  "Messages this worker tried again alone after an unexpected failure (not "
                                  "Redis unreachable); one failing every attempt is a processing_error dead "
                                  "letter", value=view.processing_retries)
