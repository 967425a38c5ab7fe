"""Issue 15, part 5: junk rankers and variants must not spend the sampling budget.

Users declare the variants that count (``[stream] variants``, default control and canary) and optionally a
pattern ranker names must match (``ranker_pattern``); an impression of anything else is counted under
``other`` and never sampled (``undeclared = "other"``), or is a dead letter ``undeclared_variant`` /
``undeclared_ranker`` (``undeclared = "dead_letter"``). A simulated stream with 5,000 junk impressions
mixed in (each a distinct variant or ranker name) must give exactly the numbers of the stream alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.core.canary import CanaryConfig, comparisons
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.counters import DEAD_LETTER as DEAD_LETTER_COUNTER
from monitor.core.stream.counters import UNDECLARED, Counter
from monitor.export.prometheus import RelevanceCollector
from monitor.sim import SimConfig, simulate
from monitor.store.memory import MemoryPipeline
from monitor.worker.settings import SettingsError, load_settings
from tests.support.declared_variants import (
    BUDGET,
    DEAD_LETTER,
    DECLARED,
    JUNK,
    Events,
    run,
    with_junk,
)

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")

REAL_RANKERS, REAL_VARIANTS = {"ranker-a", "ranker-b"}, {"control", "canary"}


def sim_events(seed: int) -> Events:
    result = simulate(SimConfig(seed=seed, n_sessions=3000))
    return [(e.topic, e.key, e.value) for e in result.events]


def real_counters(pipeline: MemoryPipeline) -> dict[Counter, float]:
    """Counters of the real traffic: not the undeclared ones, nor any group counted as other."""
    return {c: v for c, v in pipeline.counters.items()
            if v and c.name not in (UNDECLARED, DEAD_LETTER_COUNTER) and "other" not in c.group.split("|")}


def sampled(pipeline: MemoryPipeline) -> float:
    return sum(v for c, v in pipeline.counters.items() if c.name == "sampled")


def budget(pipeline: MemoryPipeline) -> list[dict[tuple[str, int], float]]:
    return [dict(state.budget) for state in pipeline.state]


def assert_same_real_numbers(dirty: MemoryPipeline, clean: MemoryPipeline) -> None:
    assert real_counters(dirty) == real_counters(clean)
    clean_totals, dirty_totals = clean.snapshot().totals(), dirty.snapshot().totals()
    assert set(dirty_totals) == set(clean_totals)
    for group, stats in clean_totals.items():
        assert dirty_totals[group] == pytest.approx(stats, rel=0, abs=1e-9), group
    assert budget(dirty) == budget(clean)
    assert list(dirty.requests) == list(clean.requests)
    assert dirty.history() == clean.history()
    assert comparisons(dirty.history(), list(dirty.deploys), CanaryConfig()) == comparisons(
        clean.history(), list(clean.deploys), CanaryConfig())


ANYTHING = StreamConfig(budget=BUDGET, variants=(), join_window=1800)  # the behaviour before part 5
CONFIGS = {"declared": DECLARED, "anything": ANYTHING, "dead_letter": DEAD_LETTER}


@pytest.fixture(scope="module")
def streams() -> tuple[Events, Events]:
    events = sim_events(3)
    return events, with_junk(events, 3)


@pytest.fixture(scope="module")
def runs(streams: tuple[Events, Events]) -> dict[tuple[str, str], MemoryPipeline]:
    """(config, "clean" or "dirty") → the pipeline run to the end, each computed once for the module."""
    class Runs(dict[tuple[str, str], MemoryPipeline]):
        def __missing__(self, key: tuple[str, str]) -> MemoryPipeline:
            config, which = key
            self[key] = run(streams[0] if which == "clean" else streams[1], CONFIGS[config])
            return self[key]

    return Runs()


def test_the_stream_without_junk_spends_the_budget(runs: dict[tuple[str, str], MemoryPipeline]) -> None:
    """The premise: the budget binds on the simulated hour (else no junk could take anything from it)."""
    clean = runs["declared", "clean"]
    impressions = sum(v for c, v in clean.counters.items() if c.name == "impressions")
    assert impressions > 2900  # 3,000 sessions, a few duplicates
    assert 500 <= sampled(clean) < 0.5 * impressions
    for bucket, amount in BUDGET.items():
        spent = sum(v for state in clean.state for (b, _), v in state.budget.items() if b == bucket)
        assert spent >= 0.9 * amount, bucket


def test_junk_counted_as_other_changes_no_number_of_the_real_traffic(
        runs: dict[tuple[str, str], MemoryPipeline]) -> None:
    clean, dirty = runs["declared", "clean"], runs["declared", "dirty"]
    assert_same_real_numbers(dirty, clean)
    assert sampled(dirty) == sampled(clean)
    assert dirty.counter("undeclared", label="variant") == JUNK / 2
    assert dirty.counter("undeclared", label="ranker") == JUNK / 2
    other = {c.group: v for c, v in dirty.counters.items()
             if c.name == "impressions" and "other" in c.group.split("|")}
    assert sum(other.values()) == JUNK
    assert {g.split("|", 1)[1] for g in other} == {"ranker-a|other", "other|control"}
    assert not any(c.name != "impressions" for c in dirty.counters if "other" in c.group.split("|"))
    assert not dirty.dead_letters
    junk_ids = {f"junk-{i}" for i in range(JUNK)}
    assert not any(sid in junk_ids for state in dirty.state for sid in state.records)


def test_without_declared_variants_the_junk_spends_the_budget(
        runs: dict[tuple[str, str], MemoryPipeline]) -> None:
    """The defect, on the same streams: with every variant and ranker accepted (``variants = []``, no
    pattern), the junk impressions are sampled like real ones and take real sessions' places. Each
    partition's share binds in every bucket, with or without the junk, so both streams sample the budget's
    sum, 700 sessions, and each junk session sampled is one real session fewer (on this stream 122 of the
    700)."""
    clean, dirty = runs["anything", "clean"], runs["anything", "dirty"]
    assert sampled(clean) == sampled(runs["declared", "clean"])  # the real traffic is all declared
    assert sampled(clean) == sampled(dirty) == sum(BUDGET.values())  # the budget: a hard cap, and it binds
    real = {c: v for c, v in dirty.counters.items() if c.name == "sampled" and "junk" not in c.group
            and "|exp-" not in c.group}
    junk = sampled(dirty) - sum(real.values())
    assert junk > 100
    assert sum(real.values()) == sampled(clean) - junk
    assert dirty.counter("undeclared", label="variant") == dirty.counter("undeclared", label="ranker") == 0


def test_label_values_stay_bounded_in_prometheus(runs: dict[tuple[str, str], MemoryPipeline]) -> None:
    """Even with no cap on rankers and variants in the exporter, no junk name becomes a label value."""
    dirty = runs["declared", "dirty"]
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(dirty.snapshot, max_rankers=100_000, max_variants=100_000))
    rankers: set[str] = set()
    variants: set[str] = set()
    for family in registry.collect():
        for sample in family.samples:
            rankers.update([sample.labels["ranker"]] if "ranker" in sample.labels else [])
            variants.update([sample.labels["variant"]] if "variant" in sample.labels else [])
    assert rankers == REAL_RANKERS | {"other"}
    assert variants == REAL_VARIANTS | {"other"}
    for reason in ("variant", "ranker"):
        value = registry.get_sample_value("search_relevance_undeclared_impressions_total", {"reason": reason})
        assert value == JUNK / 2
    # the junk's impressions are exported under other, and nothing else of theirs is
    impressions = registry.get_sample_value("search_relevance_impressions_total",
                                            {"bucket": "tail", "ranker": "other", "variant": "control"})
    assert impressions is not None and impressions > 0
    assert registry.get_sample_value("search_relevance_sampled_total",
                                     {"bucket": "tail", "ranker": "other", "variant": "control"}) is None


def test_junk_as_dead_letters_changes_no_number_of_the_real_traffic(
        runs: dict[tuple[str, str], MemoryPipeline]) -> None:
    clean, dirty = runs["dead_letter", "clean"], runs["dead_letter", "dirty"]
    assert_same_real_numbers(dirty, clean)
    assert real_counters(clean) == real_counters(runs["declared", "clean"])
    assert dirty.counter("dead_letter", label="undeclared_variant") == JUNK / 2
    assert dirty.counter("dead_letter", label="undeclared_ranker") == JUNK / 2
    assert len(dirty.dead_letters) == JUNK and not clean.dead_letters
    assert dirty.counter("undeclared", label="variant") == dirty.counter("undeclared", label="ranker") == 0
    by_code = {d.code: d for d in dirty.dead_letters}
    assert set(by_code) == {"undeclared_variant", "undeclared_ranker"}
    variant, ranker = by_code["undeclared_variant"], by_code["undeclared_ranker"]
    assert variant.field == "variant" and "undeclared variant 'exp-" in variant.reason
    assert "declared variants are control, canary" in variant.reason
    assert ranker.field == "ranker" and "undeclared ranker 'junk-" in ranker.reason
    assert "ranker_pattern 'ranker-[a-z]'" in ranker.reason
    assert json.loads(variant.raw)["session_id"].startswith("junk-")


def test_an_impression_without_a_variant_is_control_and_declared() -> None:
    events: Events = [("impressions", b"s1", json.dumps({
        "type": "impression", "session_id": "s1", "query": "q", "ranker": "r1", "ts": 1000.0,
        "results": [{"doc_id": "a", "position": 1}]}).encode())]
    only_control = StreamConfig(variants=("control",), undeclared="dead_letter")
    pipeline = run(events, only_control)
    assert not pipeline.dead_letters and pipeline.counter("sampled", "tail|r1|control") == 1
    only_canary = StreamConfig(variants=("canary",), undeclared="dead_letter")
    [dead] = run(events, only_canary).dead_letters
    assert dead.code == "undeclared_variant" and "'control'" in dead.reason


def test_a_variant_named_like_a_reason_fragment_still_gets_its_own_code() -> None:
    """The code is given, not guessed from the reason's text (which quotes the variant)."""
    events: Events = [("impressions", b"s1", json.dumps({
        "type": "impression", "session_id": "s1", "query": "q", "ranker": "r1", "ts": 1000.0,
        "variant": "missing out of range", "results": [{"doc_id": "a", "position": 1}]}).encode())]
    [dead] = run(events, StreamConfig(undeclared="dead_letter")).dead_letters
    assert dead.code == "undeclared_variant"


def test_any_variant_and_any_ranker_when_nothing_is_declared() -> None:
    config = StreamConfig(variants=())
    assert config.variants == () and config.ranker_pattern is None
    events: Events = [("impressions", b"s1", json.dumps({
        "type": "impression", "session_id": "s1", "query": "q", "ranker": "anything at all", "ts": 1000.0,
        "variant": "holdout", "results": [{"doc_id": "a", "position": 1}]}).encode())]
    pipeline = run(events, config)
    assert pipeline.counter("sampled", "tail|anything at all|holdout") == 1


@pytest.mark.parametrize(("options", "message"), [
    ({"variants": "control"}, "variants must be a list of variant names"),
    ({"variants": ("control", "")}, "variants: '' is not a variant name"),
    ({"variants": ("control", "two words")}, "variants: 'two words' is not a variant name"),
    ({"variants": ("control", 7)}, "variants: 7 is not a variant name"),
    ({"variants": ("control", "other")}, "'other' is reserved"),
    ({"variants": ("canary", "canary")}, "a name given twice"),
    ({"ranker_pattern": "ranker-("}, "ranker_pattern 'ranker-(' is not a valid regular expression: "
                                     "missing ), unterminated subpattern"),
    ({"ranker_pattern": ""}, "ranker_pattern must be a non-empty regular expression"),
    ({"undeclared": "drop"}, "undeclared must be one of other, dead_letter, got 'drop'"),
])
def test_bad_declarations_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        StreamConfig(**options)  # type: ignore[arg-type]
    assert message in str(error.value)


def test_the_settings_file_declares_them(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text('[stream]\nvariants = ["control", "canary", "holdout"]\nranker_pattern = "ranker-.+"\n'
                    'undeclared = "dead_letter"\n')
    stream = load_settings({}, path).stream
    assert stream.variants == ("control", "canary", "holdout")
    assert (stream.ranker_pattern, stream.undeclared) == ("ranker-.+", "dead_letter")
    path.write_text("[stream]\nvariants = []\n")
    assert load_settings({}, path).stream.variants == ()
    assert load_settings({}, None).stream.variants == ("control", "canary")
    path.write_text('[stream]\nranker_pattern = "["\n')
    with pytest.raises(SettingsError, match=r"monitor\.toml: \[stream\] ranker_pattern '\[' is not a valid"):
        load_settings({}, path)
    path.write_text('[stream]\nundeclared = "ignore"\n')
    with pytest.raises(SettingsError, match=r"\[stream\] undeclared must be one of other, dead_letter"):
        load_settings({}, path)
