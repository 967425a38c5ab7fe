"""Grades reused across sessions (issue 14, part 1): a sampled session's own grades are its query's too.

A new session of the query starts with them (and asks annotators only for what is still missing), and a
change reaches every session of the query still in the join. The final numbers must not depend on how
the topics interleave, so the rule that picks a document's shared grade is a function of the final grades
alone: the grade of the earliest session (impression time, then id) that graded it; a session's own grade
wins over its query's judgment, which wins over a shared grade. Checked here against a brute-force
recomputation over many interleavings and partition counts, and the option that keeps today's behaviour.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from monitor.core.decoding import decode_event
from monitor.core.events import Annotation, EventError, encode_annotation
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.held_grades import (
    SHARED_KEEP,
    changed_shared,
    merge_shared,
    shared_grades,
    shared_refresh,
)
from monitor.core.stream.session import query_key
from monitor.core.stream.stats import summarise
from monitor.store.memory import MemoryPipeline
from monitor.worker.settings import SettingsError, load_settings
from tests.support.shared_grades import (
    CONFIG,
    UNLIMITED,
    brute_force,
    query_labels,
    shared_stream,
)
from tests.support.streams import impression, interleave, label, submit_all

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")


def assert_equals_brute_force(pipeline: MemoryPipeline, expected: dict[str, dict[str, float]]) -> None:
    got = pipeline.windows()
    assert {g for (_, g) in got} == set(expected)
    for group, want in expected.items():
        summary = summarise(got[("all", group)])
        assert (summary.sessions, summary.expired) == (want["sessions"], want["expired"]), group
        if want["sessions"]:
            assert summary.dcg == pytest.approx(want["dcg"] / want["sessions"], abs=1e-9)
            assert summary.ndcg == pytest.approx(want["ndcg"] / want["sessions"], abs=1e-9)
            assert (summary.pairs.positive("seed"), summary.pairs.discordant) == (want["pos"], want["neg"])


@pytest.mark.parametrize("seed", range(3))
def test_shared_grades_give_the_brute_force_numbers_in_any_interleaving(seed: int) -> None:
    events, truth = shared_stream(seed)
    expected = brute_force(truth, CONFIG)
    # the test means something: sharing changes the numbers and saves requests
    assert expected != brute_force(truth, dataclasses.replace(CONFIG, share_session_grades=False))
    requested = []
    for order in range(4):
        shuffled = interleave(events, random.Random(100 * seed + order)) if order else list(events)
        pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=1 + order % 3, clock=lambda: None)
        submit_all(pipeline, shuffled)
        assert_equals_brute_force(pipeline, expected)
        requested.append(sum(v for c, v in pipeline.counters.items() if c.name == "judgments_requested"))
    alone = MemoryPipeline(dataclasses.replace(CONFIG, share_session_grades=False), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(alone, events)
    asked_alone = sum(v for c, v in alone.counters.items() if c.name == "judgments_requested")
    assert requested[0] < 0.6 * asked_alone  # in stream order, most of a query's documents were graded


def test_without_sharing_session_grades_stay_with_their_session() -> None:
    config = dataclasses.replace(CONFIG, share_session_grades=False)
    events, truth = shared_stream(7)
    for order in range(2):
        pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=1 + order, clock=lambda: None)
        submit_all(pipeline, interleave(events, random.Random(order)) if order else events)
        assert_equals_brute_force(pipeline, brute_force(truth, config))
        assert pipeline.shared == {}


def test_a_new_session_starts_with_its_querys_grades_and_asks_only_for_the_rest() -> None:
    pipeline = MemoryPipeline(StreamConfig(k={"head": 40, "torso": 20, "tail": 3}, budget=UNLIMITED), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [
        ("impressions", b"s1", impression("s1", 1000, ["a", "b", "c"], query="q")),
        ("annotations", b"s1", label("s1", "a", 3)),
        ("annotations", b"s1", label("s1", "b", 1)),
        ("impressions", b"s2", impression("s2", 1010, ["b", "a", "d"], query="q")),   # a, b judged already
        ("impressions", b"s3", impression("s3", 1020, ["a", "b"], query="q")),        # all judged: no request
        ("impressions", b"s4", impression("s4", 1030, ["a", "b"], query="other")),   # another query
    ])
    requests = {r.session_id: (r.docs, r.judged) for r in pipeline.requests}
    assert requests == {"s1": (["a", "b", "c"], 0), "s2": (["d"], 2), "s4": (["a", "b"], 0)}
    record = pipeline.state[0].records["s3"]
    assert record.status == "scored" and record.shared == {"a": 3, "b": 1} and record.labels == {}
    assert summarise(pipeline.windows()[("1h", "tail|r1|control")]).sessions >= 1


def test_a_correction_by_the_first_grader_reaches_a_session_already_scored() -> None:
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5, budget=UNLIMITED), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [
        ("impressions", b"s1", impression("s1", 1000, ["a"], query="q")),
        ("annotations", b"s1", label("s1", "a", 3)),
        ("impressions", b"s2", impression("s2", 1010, ["a"], query="q")),  # scored at once with s1's 高
        ("annotations", b"s1", label("s1", "a", 1)),                      # s1 corrects it: s2 follows
    ])
    records = {sid: r for state in pipeline.state for sid, r in state.records.items()}
    assert records["s2"].effective() == {"a": 1} and records["s2"].status == "scored"
    summary = summarise(pipeline.windows()[("1h", "tail|r1|control")])
    assert summary.sessions == 2 and summary.dcg == pytest.approx(0.3)


@pytest.mark.parametrize("order", ["earliest first", "latest first"])
def test_the_earliest_graders_grade_wins_whatever_order_the_grades_come_in(order: str) -> None:
    """s1 (shown first) grades a 高, s2 grades it 无: s3 takes 高 either way; each keeps its own."""
    grades = [("annotations", b"s1", label("s1", "a", 3)), ("annotations", b"s2", label("s2", "a", 0))]
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5, budget=UNLIMITED), FOUR_LEVEL_SCALE,
                              partitions=3, clock=lambda: None)
    submit_all(pipeline, [
        ("impressions", b"s3", impression("s3", 1020, ["a"], query="q")),
        ("impressions", b"s2", impression("s2", 1010, ["a"], query="q")),
        ("impressions", b"s1", impression("s1", 1000, ["a"], query="q")),
        *(grades if order == "earliest first" else grades[::-1]),
    ])
    records = {sid: r for state in pipeline.state for sid, r in state.records.items()}
    assert {sid: r.effective() for sid, r in records.items()} == {"s1": {"a": 3}, "s2": {"a": 0}, "s3": {"a": 3}}


def test_own_grade_over_query_judgment_over_shared_grade() -> None:
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5, budget=UNLIMITED), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [
        ("impressions", b"s1", impression("s1", 1000, ["a", "b", "c"], query="q")),
        ("annotations", b"s1", label("s1", "a", 0)),
        ("annotations", b"s1", label("s1", "b", 0)),
        ("annotations", b"s1", label("s1", "c", 0)),
        ("annotations", b"q", query_labels("q", {"b": 2})),
        ("impressions", b"s2", impression("s2", 1010, ["a", "b", "c"], query="q")),
        ("annotations", b"s2", label("s2", "c", 3)),
    ])
    records = {sid: r for state in pipeline.state for sid, r in state.records.items()}
    assert records["s2"].effective() == {"a": 0, "b": 2, "c": 3}
    assert records["s1"].effective() == {"a": 0, "b": 0, "c": 0}  # its own, over the query's b


def test_merge_keeps_the_earliest_graders_only_and_every_view_stays_exact() -> None:
    rng = random.Random(3)
    for _ in range(200):
        writes = [(f"s{rng.randrange(8)}", float(rng.randrange(5)), rng.randint(0, 3)) for _ in range(12)]
        full: dict[str, tuple[float, int]] = {}
        kept: dict[str, tuple[float, int]] = {}
        for origin, ts, level in writes:
            ts = {o: t for o, (t, _) in full.items()}.get(origin, ts)  # a session's time never changes
            full[origin] = (ts, level)
            kept, _ = merge_shared(kept, origin, ts, level)
            assert len(kept) <= SHARED_KEEP
            for viewer in [f"s{i}" for i in range(9)]:
                assert shared_grades({"d": kept}, viewer) == shared_grades({"d": full}, viewer), viewer


def test_shared_refresh_round_trips_and_a_bad_one_is_a_dead_letter() -> None:
    key = query_key("蓝牙耳机")
    refresh = shared_refresh("s-1", key, {"d-2": 1}, FOUR_LEVEL_SCALE)
    raw = encode_annotation(refresh)
    assert json.loads(raw)["scope"] == "shared" and json.loads(raw)["query_key"] == key
    decoded = decode_event(raw, FOUR_LEVEL_SCALE)
    assert isinstance(decoded, Annotation) and decoded == refresh and decoded.from_shared
    for bad, field in ((dict(json.loads(raw), query_key="nope"), "query_key"),
                       ({k: v for k, v in json.loads(raw).items() if k != "query_key"}, "query_key"),
                       ({k: v for k, v in json.loads(raw).items() if k != "session_id"} | {"query": "q"}, "scope")):
        with pytest.raises(EventError) as error:
            decode_event(json.dumps(bad).encode(), FOUR_LEVEL_SCALE)
        assert error.value.field == field


def test_share_session_grades_is_validated() -> None:
    with pytest.raises(ConfigError, match="share_session_grades"):
        StreamConfig(share_session_grades="yes")  # type: ignore[arg-type]
    assert StreamConfig().share_session_grades is True


def test_shared_grades_are_forgotten_after_state_ttl() -> None:
    config = StreamConfig(join_window=100, state_ttl=1000, min_coverage=0.5, budget=UNLIMITED)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, prune_every=1, clock=lambda: None)
    submit_all(pipeline, [
        ("impressions", b"s1", impression("s1", 1000, ["a"], query="q")),
        ("annotations", b"s1", label("s1", "a", 3)),
    ])
    assert pipeline.shared
    for i in range(3):
        pipeline.submit("impressions", f"t{i}".encode(), impression(f"t{i}", 3000.0 + i, ["z"], query="other"))
    assert query_key("q") not in pipeline.shared
    pipeline.submit("impressions", b"s5", impression("s5", 3100, ["a"], query="q"))
    assert [r.docs for r in pipeline.requests if r.session_id == "s5"] == [["a"]]  # asked again


def test_the_worker_reads_share_session_grades_from_the_stream_table(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text("[stream]\nshare_session_grades = false\n")
    assert load_settings({}, path).stream.share_session_grades is False
    assert load_settings({}).stream.share_session_grades is True
    path.write_text('[stream]\nshare_session_grades = "no"\n')
    with pytest.raises(SettingsError, match="share_session_grades must be true or false"):
        load_settings({}, path)


def test_shared_grades_read_for_a_batch_are_parsed_only_when_a_step_asks() -> None:
    import msgspec

    from monitor.store import scripts

    calls: list[str] = []
    real = scripts.parse_shared

    def counting(stored):  # type: ignore[no-untyped-def]
        calls.append("parsed")
        return real(stored)

    shared = scripts.LazyShared()
    stored = {b"d1": msgspec.msgpack.encode([["s1", "10.0", 3]])}
    shared.hold("qa", stored)
    shared.hold("qb", {b"d2": json.dumps([["s2", "11.0", 1]]).encode()})
    original, scripts.parse_shared = scripts.parse_shared, counting
    try:
        assert "qa" in shared and len(shared) == 2 and sorted(shared) == ["qa", "qb"] and calls == []
        assert shared.get("qa", {}) == {"d1": {"s1": (10.0, 3)}} and calls == ["parsed"]
        assert shared["qa"] == {"d1": {"s1": (10.0, 3)}} and calls == ["parsed"]  # once
        shared["qb"] = {"d9": {"s9": (1.0, 0)}}  # a batch's own merge replaces what was read
        assert shared.get("qb") == {"d9": {"s9": (1.0, 0)}} and calls == ["parsed"]
        assert shared.get("qc", {}) == {} and "qc" not in shared
        del shared["qa"]
        assert sorted(shared) == ["qb"]
    finally:
        scripts.parse_shared = original


def _entries(rng: random.Random, docs: list[str], origins: list[str]) -> dict[str, dict[str, tuple[float, int]]]:
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for doc in rng.sample(docs, rng.randint(0, len(docs))):
        out[doc] = {o: (float(rng.randint(0, 3)), rng.randint(0, 3))
                    for o in rng.sample(origins, rng.randint(1, SHARED_KEEP + 1))}
    return out


@pytest.mark.parametrize("seed", range(300))
def test_changed_shared_is_the_difference_of_the_two_whole_views(seed: int) -> None:
    """What a session must be told: the views over every document, compared whole (the brute force),
    whatever changed between the two hashes (new documents, new graders, corrections, ties in ts)."""
    rng = random.Random(seed)
    docs, origins = [f"d{i}" for i in range(6)], [f"s{i}" for i in range(4)]
    before = _entries(rng, docs, origins)
    now = {doc: dict(entries) for doc, entries in before.items()} if rng.random() < 0.7 else {}
    for doc, entries in _entries(rng, docs, origins).items():  # some documents changed or new
        if rng.random() < 0.5:
            now[doc] = {**now.get(doc, {}), **entries}
    exclude = rng.choice(origins)
    view, seen = shared_grades(now, exclude), shared_grades(before, exclude)
    brute = {doc: level for doc, level in view.items() if seen.get(doc) != level}
    assert changed_shared(now, before, exclude) == brute
    assert changed_shared(before, before, exclude) == {}
