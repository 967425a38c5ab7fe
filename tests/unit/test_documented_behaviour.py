"""Behaviour that docs/metrics.md and docs/events.md state (issue 15): each test pins one documented rule,
through the in-process pipeline, so a change of the rule fails here before the docs go stale."""

from __future__ import annotations

import contextlib
import io
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from monitor.core.aggregates import Z_95
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.metrics import dcg, ndcg
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.stats import summarise
from monitor.demo import replay_cli
from monitor.store.memory import MemoryPipeline

GRADES = ["无", "低", "中", "高"]
GAIN = [0.0, 0.3, 0.7, 1.0]
TAIL = "tail|r1|control"
Event = tuple[str, bytes, bytes]


def impression(sid: str, ts: float, docs: list[str], query: str | None = None,
               scores: list[float | None] | None = None, variant: str | None = "control") -> Event:
    """``scores``: one per document, None leaves that result without a score (default 100, 99, …)."""
    results: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        result: dict[str, Any] = {"doc_id": doc, "position": i + 1}
        score = 100.0 - i if scores is None else scores[i]
        if score is not None:
            result["score"] = score
        results.append(result)
    event: dict[str, Any] = {"type": "impression", "session_id": sid, "query": query or f"q-{sid}",
                             "query_bucket": "tail", "ranker": "r1", "ts": ts, "results": results}
    if variant is not None:
        event["variant"] = variant
    return "impressions", sid.encode(), json.dumps(event, ensure_ascii=False).encode()


def label(sid: str, doc: str, level: int) -> Event:
    return "annotations", sid.encode(), json.dumps(
        {"type": "annotation", "session_id": sid, "doc_id": doc, "grade": GRADES[level]},
        ensure_ascii=False).encode()


def query_label(query: str, doc: str, level: int) -> Event:
    return "annotations", query.encode(), json.dumps(
        {"type": "annotation", "query": query, "doc_id": doc, "grade": GRADES[level]},
        ensure_ascii=False).encode()


def run(events: list[Event], **config: Any) -> MemoryPipeline:
    """The events through one partition, then every pending session closed (end of a replay)."""
    pipeline = MemoryPipeline(StreamConfig(**config), FOUR_LEVEL_SCALE, clock=lambda: None)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)
    return pipeline


def record(pipeline: MemoryPipeline, sid: str) -> SessionRecord:
    return pipeline.state[0].records[sid]


def contribution(pipeline: MemoryPipeline, sid: str) -> dict[str, float]:
    stats = record(pipeline, sid).contribution
    assert stats is not None
    return stats


def pairs(pipeline: MemoryPipeline, sid: str) -> tuple[float, float, float, float]:
    c = contribution(pipeline, sid)
    return c["concordant"], c["discordant"], c["grade_tied"], c["score_tied"]


# --- 1. coverage and min_coverage ---------------------------------------------------------------------

def test_coverage_divides_by_the_documents_shown_when_fewer_than_k() -> None:
    assert StreamConfig().min_coverage == 0.8 and StreamConfig().k["tail"] == 20
    shown = ["v", "w", "x", "y", "z"]  # 5 shown, k = 20: the denominator is 5, not 20
    four = run([impression("s", 1000, shown)] + [label("s", d, 1) for d in shown[:4]])
    assert record(four, "s").status == "scored"  # 4/5 = 0.8 reaches the minimum (≥)
    assert contribution(four, "s")["coverage"] == pytest.approx(0.8)
    three = run([impression("s", 1000, shown)] + [label("s", d, 1) for d in shown[:3]]
                + [label("s", "not-shown", 3)])  # a grade of an unshown document covers nothing
    assert record(three, "s").status == "expired"
    assert contribution(three, "s") == {"expired": 1.0, "expired_coverage": pytest.approx(0.6)}


def test_coverage_reads_only_the_top_k_when_more_were_shown() -> None:
    k2 = {"head": 2, "torso": 2, "tail": 2}
    pipeline = run([impression("s", 1000, ["v", "w", "x", "y", "z"])]
                   + [label("s", d, 1) for d in ("v", "y", "z")], k=k2)  # y, z are below the top 2
    assert record(pipeline, "s").docs == ["v", "w"]
    assert contribution(pipeline, "s") == {"expired": 1.0, "expired_coverage": 0.5}


def test_label_coverage_is_the_mean_over_scored_and_expired_sessions() -> None:
    pipeline = run([impression("a", 1000, ["x"]), label("a", "x", 3),       # scored, coverage 1
                    impression("b", 1000, ["x", "y"])])                       # expired, coverage 0
    summary = summarise(pipeline.windows()[("1h", TAIL)])
    assert (summary.sessions, summary.expired, summary.coverage) == (1, 1, 0.5)


# --- 2. PNR -------------------------------------------------------------------------------------------

# shown a, b, c; the model's scores put them in the opposite order; a = 高, b = 无, c unlabelled
ASCENDING: list[float | None] = [1.0, 2.0, 3.0]
LABELS = [label("s", "a", 3), label("s", "b", 0)]


def test_pnr_leaves_unlabelled_documents_out_and_orients_pairs_by_score() -> None:
    pipeline = run([impression("s", 1000, ["a", "b", "c"], scores=ASCENDING), *LABELS], min_coverage=0.5)
    assert pairs(pipeline, "s") == (0, 1, 0, 0)  # only (a, b): b scored higher with the lower grade
    assert summarise(pipeline.windows()[("1h", TAIL)]).pnr == 0.0


def test_pnr_without_scores_uses_the_shown_order() -> None:
    pipeline = run([impression("s", 1000, ["a", "b", "c"], scores=[None, None, None]), *LABELS],
                   min_coverage=0.5)
    assert record(pipeline, "s").scores is None
    assert pairs(pipeline, "s") == (1, 0, 0, 0)  # a shown above b
    assert summarise(pipeline.windows()[("1h", TAIL)]).pnr == math.inf


def test_one_missing_score_in_the_top_k_makes_the_whole_list_use_the_shown_order() -> None:
    # c's score is missing, and c is not even labelled: a and b's scores are ignored all the same
    pipeline = run([impression("s", 1000, ["a", "b", "c"], scores=[1.0, 2.0, None]), *LABELS],
                   min_coverage=0.5)
    assert record(pipeline, "s").scores is None
    assert pairs(pipeline, "s") == (1, 0, 0, 0)
    # below the top k a missing score changes nothing
    k2 = {"head": 2, "torso": 2, "tail": 2}
    below = run([impression("s", 1000, ["a", "b", "c"], scores=[1.0, 2.0, None]), *LABELS], k=k2)
    assert record(below, "s").scores == [1.0, 2.0]
    assert pairs(below, "s") == (0, 1, 0, 0)


def test_pnr_pairs_with_equal_scores_are_left_out() -> None:
    pipeline = run([impression("s", 1000, ["a", "b"], scores=[1.0, 1.0]), *LABELS])
    assert pairs(pipeline, "s") == (0, 0, 0, 1)
    assert summarise(pipeline.windows()[("1h", TAIL)]).pnr is None  # no pair to count: no data


# --- 3. the NDCG ideal --------------------------------------------------------------------------------

QUERY = "蓝牙耳机"
S1 = [impression("s1", 1000, ["a", "b"], query=QUERY), label("s1", "a", 1), label("s1", "b", 0)]
S1_GAINS = [GAIN[1], GAIN[0]]


def test_ndcg_ideal_uses_the_sessions_own_grades_of_unshown_documents() -> None:
    alone = run(S1)
    assert contribution(alone, "s1")["ndcg"] == 1.0
    own = run([*S1, label("s1", "x", 3)])  # x not shown
    expected = ndcg(S1_GAINS, [GAIN[1], GAIN[0], GAIN[3]], 20)
    assert contribution(own, "s1")["ndcg"] == pytest.approx(expected) == pytest.approx(0.2523, abs=1e-4)
    assert contribution(own, "s1")["dcg"] == pytest.approx(dcg(S1_GAINS, 20))  # DCG: shown top k only


def test_ndcg_ideal_uses_the_querys_judgments_of_unshown_documents() -> None:
    pipeline = run([*S1, query_label(QUERY, "y", 2)])
    expected = ndcg(S1_GAINS, [GAIN[1], GAIN[0], GAIN[2]], 20)
    assert contribution(pipeline, "s1")["ndcg"] == pytest.approx(expected)


def test_ndcg_ideal_uses_other_sessions_grades_of_the_query_when_shared() -> None:
    assert StreamConfig().share_session_grades is True
    # s2, shown later, grades c and d, which s1 never showed: they join s1's ideal, in either order
    s2 = [impression("s2", 1100, ["c", "d"], query=QUERY), label("s2", "c", 3), label("s2", "d", 0)]
    expected = ndcg(S1_GAINS, [GAIN[1], GAIN[0], GAIN[3], GAIN[0]], 20)
    for events in (S1 + s2, s2 + S1):
        shared = run(events)
        assert record(shared, "s1").shared == {"c": 3, "d": 0}
        assert contribution(shared, "s1")["ndcg"] == pytest.approx(expected)
        # and s1's grades join s2's ideal: s2's NDCG is below 1 although its own list is ideal
        assert contribution(shared, "s2")["ndcg"] == pytest.approx(
            ndcg([GAIN[3], GAIN[0]], [GAIN[3], GAIN[0], GAIN[1], GAIN[0]], 20))
    first = run(S1 + s2)
    assert first.counter("rescored", TAIL) == 2  # s1, scored already, re-scored by s2's c and d
    off = run(S1 + s2, share_session_grades=False)
    assert contribution(off, "s1")["ndcg"] == 1.0


def test_a_shared_grade_is_the_first_shown_sessions_and_a_query_judgment_overrides_it() -> None:
    early = [impression("s0", 900, ["c"], query=QUERY), label("s0", "c", 1)]
    later = [impression("s2", 1100, ["c"], query=QUERY), label("s2", "c", 3)]
    s9 = [impression("s9", 1300, ["c"], query=QUERY)]
    for events in (early + later + s9, later + early + s9):
        assert record(run(events), "s9").effective() == {"c": 1}  # s0 was shown first
    judged = run(later + early + s9 + [query_label(QUERY, "c", 2)])
    assert record(judged, "s9").effective() == {"c": 2}
    assert record(judged, "s2").effective() == {"c": 3}  # a session's own grade wins over both


def test_a_correction_by_the_first_grader_counts_once_per_session_that_takes_it() -> None:
    events = [impression("s0", 900, ["c"], query=QUERY), label("s0", "c", 1),
              impression("s1", 1000, ["c", "d"], query=QUERY),
              impression("s2", 1000, ["c", "e"], query=QUERY),
              label("s0", "c", 3)]
    pipeline = run(events)
    assert record(pipeline, "s1").effective() == record(pipeline, "s2").effective() == {"c": 3}
    assert pipeline.counter("corrections", TAIL) == 3  # s0's own, then s1's and s2's shared grade


# --- 4. variant, duplicates, the DCG interval, the summary's expired count ----------------------------

def test_a_missing_variant_counts_as_control() -> None:
    pipeline = run([impression("s", 1000, ["x"], variant=None), label("s", "x", 3)])
    assert record(pipeline, "s").variant == "control"
    assert ("1h", TAIL) in pipeline.windows()
    assert pipeline.requests[0].variant == "control"


def test_only_the_first_of_duplicate_impressions_counts() -> None:
    pipeline = run([impression("s", 1000, ["x", "y"]), impression("s", 1001, ["z"]),
                    label("s", "x", 3), label("s", "y", 0)])
    assert record(pipeline, "s").docs == ["x", "y"] and record(pipeline, "s").ts == 1000
    assert pipeline.counter("impressions", TAIL) == 1 and pipeline.counter("sampled", TAIL) == 1
    assert pipeline.counter("duplicate_impressions") == 1
    assert summarise(pipeline.windows()[("1h", TAIL)]).sessions == 1


def test_a_duplicate_of_an_impression_not_sampled_counts_again() -> None:
    # the duplicate check reads the session's record, which only a sampled session has
    pipeline = run([impression("b", 999, ["x"]), impression("s", 1000, ["x"]), impression("s", 1000, ["x"])],
                   budget={"head": 1, "torso": 1, "tail": 1})
    assert set(pipeline.state[0].records) == {"b"}
    assert pipeline.counter("impressions", TAIL) == 3 and pipeline.counter("duplicate_impressions") == 0


def test_the_dcg_interval_uses_the_sample_variance() -> None:
    events: list[Event] = []
    for sid, level in (("a", 3), ("b", 2), ("c", 0)):
        events += [impression(sid, 1000, ["x"]), label(sid, "x", level)]
    summary = summarise(run(events).windows()[("1h", TAIL)])
    values = [1.0, 0.7, 0.0]
    half = Z_95 * statistics.stdev(values) / math.sqrt(3)  # stdev: n − 1 denominator
    assert summary.dcg_ci == pytest.approx((statistics.mean(values) - half, statistics.mean(values) + half))
    assert statistics.stdev(values) != pytest.approx(statistics.pstdev(values), rel=0.1)
    one = summarise(run(events[:2]).windows()[("1h", TAIL)])
    assert one.dcg == 1.0 and one.dcg_ci is None  # no interval below two sessions


def test_the_summarys_expired_count_includes_sessions_later_rescued(tmp_path: Path) -> None:
    # a replay checks the clock rules: event times after 2000; a minute into the hour, where the paced
    # budget allows more than the one session its very start allows
    start = 1_763_712_000 + 60
    lines = [impression("a", start, ["x", "y"]), impression("b", start, ["x", "y"]),
             impression("c", start + 4000, ["z"]),  # the watermark passes a's and b's deadline: both expire
             label("a", "x", 3), label("a", "y", 1)]  # a reaches full coverage: rescued, scored
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(value + b"\n" for _, _, value in lines))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert replay_cli.main([str(path), "--json"]) == 0
    summary = json.loads(out.getvalue())
    # counters: every first expiry (a, b, and c at the end of the replay) and every first scoring
    assert summary["sessions"]["sampled"] == 3
    assert summary["sessions"]["expired"] == 3 and summary["sessions"]["scored"] == 1
    # re-scored: a's first late label re-expires it (coverage 1/2), its second rescues it
    assert summary["sessions"]["rescored"] == 2
    # the per-group table is net: a counts as scored only
    (group,) = summary["groups"]
    assert (group["sessions"], group["expired"]) == (1, 2)
