"""The stream core through the in-process pipeline: join semantics, confluence, offline recomputation."""

from __future__ import annotations

import json
import math
import random

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.metrics import dcg, ndcg, pair_counts
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.sketch import classify, estimate, sketch_cells
from monitor.core.stream.stats import summarise
from monitor.store.memory import MemoryPipeline
from tests.support.streams import impression, interleave, label, random_stream, submit_all


def test_config_errors_name_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"k needs exactly the buckets"):
        StreamConfig(k={"head": 40})
    with pytest.raises(ConfigError, match=r"min_coverage must be in \[0, 1\], got 1.5"):
        StreamConfig(min_coverage=1.5)
    with pytest.raises(ConfigError, match="state_ttl"):
        StreamConfig(join_window=100, state_ttl=10)
    with pytest.raises(ConfigError, match="window name"):
        StreamConfig(windows={"1 h": 3600})


def test_sketch_never_underestimates_and_classifies() -> None:
    rng = random.Random(3)
    counts: dict[str, int] = {}
    sketch: dict[str, float] = {}
    for _ in range(5000):
        query = f"q{int(rng.paretovariate(1.2))}"
        counts[query] = counts.get(query, 0) + 1
        for row, col in sketch_cells(query, 256, 4):
            sketch[f"{row}:{col}"] = sketch.get(f"{row}:{col}", 0.0) + 1
    for query, true in counts.items():
        guess = estimate(sketch_cells(query, 256, 4), [sketch])
        assert true <= guess <= true + 0.05 * 5000
    assert [classify(f, 100, 10) for f in (150, 100, 99, 10, 9)] == ["head", "head", "torso", "torso", "tail"]


def test_early_labels_close_late_labels_and_corrections() -> None:
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [
        ("annotations", b"s1", label("s1", "a", 3)),            # before its impression
        ("impressions", b"s1", impression("s1", 1000, ["a", "b"])),
        ("annotations", b"s1", label("s1", "b", 1)),            # completes s1: scored
        ("impressions", b"s2", impression("s2", 1010, ["c", "d"])),
        ("annotations", b"s2", label("s2", "c", 2)),            # half of s2
        ("impressions", b"s3", impression("s3", 1200, ["e"])),   # watermark passes s2's deadline: scored at 0.5
        ("annotations", b"s2", label("s2", "d", 3)),            # late label: re-scored
        ("annotations", b"s1", label("s1", "b", 3)),            # correction: re-scored
    ])
    summary = summarise(pipeline.windows()[("1h", "tail|r1|control")])
    s1 = 1 + 1 / math.log2(3)
    s2 = 0.7 + 1 / math.log2(3)
    assert summary.sessions == 2 and summary.expired == 1  # s3 never labelled: expired at the end
    assert summary.dcg == pytest.approx((s1 + s2) / 2, abs=1e-12)
    assert summary.pnr == 1.0  # s1: one grade-tied pair (positive); s2: one inversion
    assert pipeline.counter("corrections", "tail|r1|control") == 1
    assert pipeline.counter("scored", "tail|r1|control") == 2
    # join lag is event time to the first scoring: s1 at once, s2 when s3 moved the watermark to 1200;
    # re-scores keep the first time
    assert summary.join_lag == pytest.approx((0 + (1200 - 1010)) / 2)


def test_invalid_events_become_dead_letters_with_codes() -> None:
    pipeline = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, clock=lambda: None)
    bad = [b"{not json", b"\xff\xfe", b'{"type": "impression", "schema": 7}',
           b'{"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "great"}', b"[]",
           label("s", "a", 2)]
    for raw in bad:
        pipeline.submit("impressions", b"k", raw)
    assert [d.code for d in pipeline.dead_letters] == ["invalid_json", "invalid_utf8", "unknown_schema",
                                                       "unknown_grade", "wrong_type", "wrong_topic"]
    assert pipeline.dead_letters[-1].reason == "annotation event on the wrong topic (impressions takes impression)"
    assert all(d.raw == raw for d, raw in zip(pipeline.dead_letters, bad, strict=True))
    assert pipeline.windows() == {}


def reference(truth: dict[str, dict], config: StreamConfig) -> dict[str, dict[str, float]]:
    """Offline recomputation per group with the metric functions directly."""
    out: dict[str, dict[str, float]] = {}
    gains = [0.0, 0.3, 0.7, 1.0]
    for session in truth.values():
        k = config.k[session["bucket"]]
        top = session["docs"][:k]
        labels = session["labels"]
        group = out.setdefault(f"{session['bucket']}|r1|{session['variant']}",
                               {"sessions": 0, "dcg": 0.0, "ndcg": 0.0, "pos": 0, "neg": 0, "expired": 0})
        coverage = sum(d in labels for d in top) / len(top)
        if coverage < config.min_coverage:
            group["expired"] += 1
            continue
        shown = [gains[labels[d]] if d in labels else 0.0 for d in top]
        pool = [gains[g] for g in labels.values()]
        judged = [d for d in top if d in labels]
        counts = pair_counts([labels[d] for d in judged], [100.0 - top.index(d) for d in judged])
        group["sessions"] += 1
        group["dcg"] += dcg(shown, k)
        group["ndcg"] += ndcg(shown, pool, k)
        group["pos"] += counts.positive("seed")
        group["neg"] += counts.discordant
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_any_interleaving_gives_the_offline_recomputation(seed: int) -> None:
    config = StreamConfig(join_window=300, min_coverage=0.6,
                          windows={"all": 10.0**7}, slices_per_window=1)
    events, truth = random_stream(seed)
    expected = reference(truth, config)
    results = []
    for order in range(3):
        shuffled = interleave(events, random.Random(order)) if order else list(events)
        pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=1 + order, clock=lambda: None)
        submit_all(pipeline, shuffled)
        results.append(pipeline.windows())
    for got in results:
        for group, want in expected.items():
            summary = summarise(got[("all", group)])
            assert summary.sessions == want["sessions"] and summary.expired == want["expired"]
            if want["sessions"]:
                assert summary.dcg == pytest.approx(want["dcg"] / want["sessions"], abs=1e-9)
                assert summary.ndcg == pytest.approx(want["ndcg"] / want["sessions"], abs=1e-9)
                assert summary.pairs.positive("seed") == want["pos"]
                assert summary.pairs.discordant == want["neg"]


def test_sampling_keeps_to_the_budget_per_bucket() -> None:
    config = StreamConfig(budget={"head": 5, "torso": 0, "tail": 2}, budget_period=3600)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    for i in range(30):  # spread over the hour: the budget is paced (a burst at its start gets far less)
        bucket = ["head", "torso", "tail"][i % 3]
        pipeline.submit("impressions", b"k", impression(f"s{i}", 100.0 + i * 120.0, ["a"], bucket))
    sampled = {b: pipeline.counter("sampled", f"{b}|r1|control") for b in ("head", "torso", "tail")}
    assert sampled == {"head": 5, "torso": 0, "tail": 2}
    assert len(pipeline.requests) == 7
    assert pipeline.counter("impressions", "torso|r1|control") == 10


def test_bucket_is_estimated_from_the_stream_when_missing() -> None:
    config = StreamConfig(head_min_frequency=20, torso_min_frequency=5)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    for i in range(40):
        pipeline.submit("impressions", b"k", impression(f"h{i}", 100.0 + i, ["a"], None, query="popular"))
    pipeline.submit("impressions", b"k", impression("rare", 200.0, ["a"], None, query="rare query"))
    assert pipeline.counter("impressions", "head|r1|control") == 20  # after 20 sightings it is head
    assert pipeline.counter("impressions", "torso|r1|control") == 15
    assert pipeline.counter("impressions", "tail|r1|control") == 6


def query_label(query: str, doc: str, level: int) -> bytes:
    return json.dumps({"type": "annotation", "query": query, "grades": [{"doc_id": doc, "grade": level}]}).encode()


@pytest.mark.parametrize("order", ["query first", "session first"])
def test_a_sessions_own_label_wins_over_its_querys_in_any_order(order: str) -> None:
    """Confluence: the final grade is the session's own, whichever arrives first (a query's judgment
    reaches the session through a fan-out that, in the worker, may come after the session's label)."""
    session, query = ("annotations", b"s1", label("s1", "a", 3)), ("annotations", b"q", query_label("q", "a", 1))
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5), FOUR_LEVEL_SCALE, clock=lambda: None)
    events = [("impressions", b"s1", impression("s1", 1000, ["a", "b"], query="q")),
              *([query, session] if order == "query first" else [session, query]),
              ("annotations", b"s1", label("s1", "b", 0))]
    submit_all(pipeline, events)
    summary = summarise(pipeline.windows()[("1h", "tail|r1|control")])
    assert summary.sessions == 1 and summary.dcg == pytest.approx(1.0)  # a=高 at rank 1, b=无


def test_a_query_level_correction_reaches_a_session_already_scored() -> None:
    pipeline = MemoryPipeline(StreamConfig(join_window=100, min_coverage=0.5), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [
        ("annotations", b"q", query_label("q", "a", 3)),
        ("impressions", b"s1", impression("s1", 1000, ["a"], query="q")),  # complete at once: scored
        ("annotations", b"q", query_label("q", "a", 1)),                   # the query's grade corrected
    ])
    summary = summarise(pipeline.windows()[("1h", "tail|r1|control")])
    assert summary.sessions == 1 and summary.dcg == pytest.approx(0.3)


@pytest.mark.slow
def test_in_process_state_stays_bounded_and_pruning_changes_no_number() -> None:
    """Hours past state_ttl: sessions, early labels, query judgments, sketch and slices are forgotten as
    Redis would expire them, memory follows state_ttl rather than the stream's length, and the rolling
    windows are those of a pipeline that never prunes."""
    config = StreamConfig(join_window=300, state_ttl=1800, min_coverage=0.5,
                          windows={"15m": 900, "1h": 3600}, budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
    pruned = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=2, keep=50, prune_every=100, clock=lambda: None)
    kept = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=2, prune_every=10**9, clock=lambda: None)
    sizes = []
    for i in range(4000):  # 40 s apart: 44 hours, 24 times state_ttl
        sid, ts = f"s{i}", 1000.0 + 40 * i
        events = [("annotations", f"q{i}".encode(), query_label(f"q{i}", f"d{i}-0", i % 4)),
                  ("annotations", sid.encode(), label(sid, f"d{i}-1", (i + 1) % 4)),
                  ("impressions", sid.encode(), impression(sid, ts, [f"d{i}-0", f"d{i}-1"], query=f"q{i}"))]
        for topic, key, value in events:
            pruned.submit(topic, key, value)
            kept.submit(topic, key, value)
        if i % 500 == 499:
            sizes.append(sum(len(s.records) for s in pruned.state) + len(pruned.query_labels)
                         + sum(len(part.slices) for part in pruned.aggregates))
    assert max(sizes) < 400 and sizes[-1] <= sizes[1] * 1.2  # flat, not growing with the stream
    assert sum(len(s.records) for s in kept.state) == 4000
    assert len(pruned.requests) <= 50
    assert pruned.windows() == kept.windows()


def test_deeply_nested_json_is_a_dead_letter_not_a_crash() -> None:
    pipeline = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, clock=lambda: None)
    pipeline.submit("impressions", b"k", b"[" * 30000 + b"]" * 30000)
    assert [(d.code, d.reason) for d in pipeline.dead_letters] == [("invalid_json", "invalid JSON: nested too deeply")]


def test_labels_that_come_before_any_impression_are_kept_until_their_sessions_come() -> None:
    """Issue 15, defect 2: a stream that starts with one query judgment and one session's labels, then
    1,100 other events (pruning runs every 100 here), then the two sessions they label: both are scored
    with coverage 1, as the worker scores them (the labels were stamped with the watermark −∞ and the
    first prune dropped them)."""
    config = StreamConfig(join_window=300, state_ttl=3600, min_coverage=0.5,
                          budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, prune_every=100, clock=lambda: None)
    pipeline.submit("annotations", b"judged", query_label("judged query", "j-a", 3))
    pipeline.submit("annotations", b"early", label("early", "e-a", 2))
    for i in range(550):
        sid = f"other{i}"
        pipeline.submit("impressions", sid.encode(), impression(sid, 1000.0 + i, [f"{sid}-a"]))
        pipeline.submit("annotations", sid.encode(), label(sid, f"{sid}-a", 1))
    pipeline.submit("impressions", b"judged", impression("judged", 1600.0, ["j-a"], query="judged query"))
    pipeline.submit("impressions", b"early", impression("early", 1601.0, ["e-a"]))
    pipeline.advance(math.inf)
    records = {sid: r for state in pipeline.state for sid, r in state.records.items()}
    for sid in ("judged", "early"):
        assert records[sid].status == "scored" and records[sid].coverage() == 1.0, sid
    assert pipeline.counter("scored", "tail|r1|control") == 552


def test_typed_events_give_what_their_bytes_give() -> None:
    """``submit_event`` (a simulator's decoded events) does what ``submit`` does after admission: the
    same snapshot, history, counters and requests over the simulator's stream, shadow lists and invalid
    events' neighbours included (only the valid events are given typed)."""
    from monitor.core.events import EventError
    from monitor.core.stream.admission import admit
    from monitor.sim import ShadowSpec, SimConfig, simulate

    config = StreamConfig(budget={"head": 40.0, "torso": 30.0, "tail": 30.0})
    events = simulate(SimConfig(seed=5, n_sessions=400, shadow=(ShadowSpec("ranker-z"),), invalid_rate=0.02)).events
    raw = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=3, clock=lambda: None)
    typed = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=3, clock=lambda: None)
    valid = 0
    for e in events:
        raw.submit(e.topic, e.key, e.value)
        try:
            event = admit(e.value, e.topic, FOUR_LEVEL_SCALE, config, None, typed.limits)
        except EventError:
            continue
        try:
            typed.submit_event(e.topic, e.key, event)
        except EventError:  # dated before what its partition keeps: a dead letter in the raw pipeline
            continue
        valid += 1
    assert valid > 1000 and raw.dead_lettered > 0
    assert typed.snapshot().totals() == raw.snapshot().totals()
    assert typed.history() == raw.history()
    assert {c: v for c, v in typed.counters.items() if c.name != "dead_letter"} == {
        c: v for c, v in raw.counters.items() if c.name != "dead_letter"}
    assert list(typed.requests) == list(raw.requests)
