"""The scrape-time collector: values equal the core's summaries; labels are bounded and never ids."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.stats import summarise
from monitor.export.label_values import cap_values, group_labels
from monitor.export.prometheus import RelevanceCollector
from monitor.store.memory import MemoryPipeline
from tests.support.streams import impression, label, submit_all


def scored_pipeline(rankers: int = 1) -> MemoryPipeline:
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5), FOUR_LEVEL_SCALE, clock=lambda: None)
    events = []
    for i in range(12):
        sid = f"session-{i}"
        ranker = f"r{i % rankers}"
        events.append(("impressions", sid.encode(),
                       impression(sid, 1000.0 + i, ["a", "b", "c"], "tail", query=f"secret query {i}",
                                  variant="canary" if i % 2 else "control", ranker=ranker)))
        for j, doc in enumerate("abc"):
            events.append(("annotations", sid.encode(), label(sid, doc, (i + j) % 4)))
    events.append(("impressions", b"bad", b"{oops"))
    submit_all(pipeline, events)
    return pipeline


def registry_for(pipeline: MemoryPipeline, **kwargs: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(pipeline.snapshot, **kwargs))
    return registry


def test_gauges_equal_the_core_summaries() -> None:
    pipeline = scored_pipeline()
    registry = registry_for(pipeline)
    for variant in ("control", "canary"):
        summary = summarise(pipeline.windows()[("15m", f"tail|r0|{variant}")])
        labels = {"bucket": "tail", "k": "20", "ranker": "r0", "variant": variant, "window": "15m"}
        assert registry.get_sample_value("search_relevance_dcg", labels) == pytest.approx(summary.dcg)
        assert registry.get_sample_value("search_relevance_ndcg", labels) == pytest.approx(summary.ndcg)
        assert registry.get_sample_value("search_relevance_pnr", labels) == pytest.approx(summary.pnr)
        lower = registry.get_sample_value("search_relevance_dcg_ci_lower", labels)
        upper = registry.get_sample_value("search_relevance_dcg_ci_upper", labels)
        assert lower is not None and upper is not None and lower < summary.dcg < upper
        short = {k: v for k, v in labels.items() if k != "k"}
        assert registry.get_sample_value("search_relevance_sessions_scored", short) == 6
    assert registry.get_sample_value("search_relevance_dead_letters_total", {"reason": "invalid_json"}) == 1
    assert registry.get_sample_value("search_relevance_impressions_total",
                                     {"bucket": "tail", "ranker": "r0", "variant": "canary"}) == 6
    assert registry.get_sample_value("search_relevance_watermark_seconds") == 1011.0


def test_no_data_is_left_out_not_zero() -> None:
    pipeline = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, clock=lambda: None)
    registry = registry_for(pipeline)
    text = generate_latest(registry).decode()
    assert "search_relevance_dcg{" not in text
    assert registry.get_sample_value("search_relevance_watermark_seconds") is None


def test_labels_never_carry_query_text_or_ids() -> None:
    text = generate_latest(registry_for(scored_pipeline())).decode()
    assert "secret query" not in text and "session-" not in text
    for doc in ('"a"', '"b"', '"c"'):
        assert doc not in text


def test_rankers_beyond_the_cap_become_other_with_exact_merged_values() -> None:
    pipeline = scored_pipeline(rankers=4)
    registry = registry_for(pipeline, max_rankers=2)
    text = generate_latest(registry).decode()
    assert 'ranker="r2"' not in text and 'ranker="r3"' not in text and 'ranker="other"' in text
    merged = [pipeline.windows()[("1h", f"tail|{r}|control")] for r in ("r2", "r3")
              if ("1h", f"tail|{r}|control") in pipeline.windows()]
    total = sum(m["dcg"] for m in merged) / sum(m["sessions"] for m in merged)
    value = registry.get_sample_value("search_relevance_dcg", {"bucket": "tail", "k": "20", "ranker": "other",
                                                               "variant": "control", "window": "1h"})
    assert value == pytest.approx(total)


def test_cap_values_and_group_labels() -> None:
    assert cap_values({"x": 1, "y": 1, "z": 3}, 2) == {"z": "z", "x": "x", "y": "other"}
    assert cap_values({"a" * 65: 9, "b": 1}, 2) == {"a" * 65: "other", "b": "b"}
    labels = group_labels({"tail|r1|control": 5, "tail|r2|canary": 1}, 1, 1)
    assert labels == {"tail|r1|control": ("tail", "r1", "control"), "tail|r2|canary": ("tail", "other", "other")}


def test_infinite_pnr_is_exported_as_inf() -> None:
    pipeline = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [("impressions", b"s", impression("s", 5.0, ["a", "b"])),
                          ("annotations", b"s", label("s", "a", 3)), ("annotations", b"s", label("s", "b", 1))])
    value = registry_for(pipeline).get_sample_value(
        "search_relevance_pnr", {"bucket": "tail", "k": "20", "ranker": "r1", "variant": "control", "window": "1h"})
    assert value is not None and math.isinf(value)
