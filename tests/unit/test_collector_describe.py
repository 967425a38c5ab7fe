"""The collectors' ``describe()`` (prometheus_client's contract): the families ``collect()`` yields, without
samples and without reading the source, so that a registry checks names at registration (issue 16, part 4).

* on real data (a small simulated stream through :class:`MemoryPipeline`, its canary verdicts, a pipeline
  view), ``describe()`` gives the names, types, help texts and label names ``collect()`` gives, in order;
* ``describe()`` never calls the source (a source that raises when called);
* two collectors exporting one name cannot be registered together; the three the worker serves can.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from monitor.core.canary import CanaryConfig, Comparison, comparisons, every_deploy
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.export.prometheus import RelevanceCollector
from monitor.export.verdict_gauges import CanaryCollector
from monitor.sim import SimConfig, simulate
from monitor.store.memory import MemoryPipeline
from monitor.worker.metrics import PipelineCollector, PipelineView


@dataclass(frozen=True)
class Simulated:
    memory: MemoryPipeline
    comparisons: list[Comparison]
    deploys: list[Deploy]  # events and deploys detected in the impressions, by time (as the worker reads them)


def simulated(sessions: int = 200, seed: int = 5) -> Simulated:
    """A small simulated stream (canary, late labels, invalid events) through the in-process pipeline."""
    result = simulate(SimConfig(seed=seed, n_sessions=sessions, duration_s=3 * 3600, invalid_rate=0.05))
    memory = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, partitions=4)
    for event in result.events:
        memory.submit(event.topic, event.key, event.value)
    deploys = sorted((d for d in memory.deploys if isinstance(d, Deploy)), key=lambda d: d.ts)
    history = memory.history()
    every = every_deploy(history, deploys)
    return Simulated(memory, comparisons(history, deploys, CanaryConfig()), every)


VIEW = PipelineView(consumed={"impressions": 12, "annotations": 30}, lag={("impressions", 0): 3},
                    waiting=4, redis_memory=1 << 20, redis_retries=1, quiet_closed=2, processing_retries=3)


def raising() -> object:
    raise AssertionError("describe() read the source")


def shape(families: Iterable[Metric]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    # label names are not public on a Metric: the families built by prometheus_client.core keep them here
    return [(m.name, m.type, m.documentation, tuple(getattr(m, "_labelnames", ()))) for m in families]


@pytest.fixture(scope="module")
def sim() -> Simulated:
    return simulated()


def collectors(sim: Simulated) -> dict[str, Collector]:
    snapshot = sim.memory.snapshot()
    return {"relevance": RelevanceCollector(lambda: snapshot, max_rankers=2, max_variants=2),
            "canary": CanaryCollector(lambda: (sim.comparisons, sim.deploys), max_rankers=1),
            "pipeline": PipelineCollector(lambda: VIEW)}


@pytest.mark.parametrize("which", ["relevance", "canary", "pipeline"])
def test_describe_gives_the_families_collect_gives(sim: Simulated, which: str) -> None:
    assert sim.comparisons and sim.deploys and sim.memory.snapshot().windows  # not vacuous
    collector = collectors(sim)[which]
    described = list(collector.describe())  # type: ignore[attr-defined]
    collected = list(collector.collect())
    assert shape(described) == shape(collected)
    assert all(not m.samples for m in described)
    assert any(m.samples for m in collected)
    label_names = {name: labels for name, _, _, labels in shape(described)}
    for family in collected:  # every sample carries exactly the described label names
        for sample in family.samples:
            assert tuple(sample.labels) == label_names[family.name], (family.name, sample)


@pytest.mark.parametrize("collector", [
    RelevanceCollector(raising),  # type: ignore[arg-type]
    CanaryCollector(raising),  # type: ignore[arg-type]
    PipelineCollector(raising),  # type: ignore[arg-type]
], ids=["relevance", "canary", "pipeline"])
def test_describe_and_registering_never_read_the_source(collector: Collector) -> None:
    assert list(collector.describe())  # type: ignore[attr-defined]
    CollectorRegistry(auto_describe=True).register(collector)
    CollectorRegistry().register(collector)


def test_the_prefix_names_every_family() -> None:
    for collector in (RelevanceCollector(raising, prefix="x"),  # type: ignore[arg-type]
                      CanaryCollector(raising, prefix="x"),  # type: ignore[arg-type]
                      PipelineCollector(raising, prefix="x")):  # type: ignore[arg-type]
        assert all(m.name.startswith("x_") for m in collector.describe())


@pytest.mark.parametrize("pair", [
    (RelevanceCollector(raising), RelevanceCollector(raising)),  # type: ignore[arg-type]
    (CanaryCollector(raising), CanaryCollector(raising)),  # type: ignore[arg-type]
    (PipelineCollector(raising), PipelineCollector(raising)),  # type: ignore[arg-type]
], ids=["relevance", "canary", "pipeline"])
def test_a_clashing_name_is_refused_at_registration(pair: tuple[Collector, Collector]) -> None:
    registry = CollectorRegistry()
    registry.register(pair[0])
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(pair[1])


def test_the_worker_s_collectors_share_one_registry() -> None:
    registry = CollectorRegistry()
    for collector in (RelevanceCollector(raising), CanaryCollector(raising),  # type: ignore[arg-type]
                      PipelineCollector(raising)):  # type: ignore[arg-type]
        registry.register(collector)
    ProcessCollector(registry=registry)
