"""A re-sent old grade must not undo a correction (issue 15, part 6).

When annotations carry ``ts``, the grade with the latest ``ts`` wins whatever the delivery order (a tie
goes to the later delivered); a grade without ``ts`` is decided by delivery and leaves the held ``ts`` in
place. The rule holds in every store: a session's own grades, its early labels (grades before its
impression) and its query's judgments (and their fan-out to the query's sessions). A grade that loses
changes nothing and is counted (``stale_labels``).
"""

from __future__ import annotations

import json
import random

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.metrics import dcg
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.held_grades import merge_grades
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.stats import summarise
from monitor.store.memory import MemoryPipeline
from tests.support.latest_grade import (
    CONFIG,
    DOCS,
    Events,
    aggregates,
    graded,
    judged,
    shown,
    ts_stream,
)
from tests.support.streams import impression

GAINS = [0.0, 0.3, 0.7, 1.0]


def run(events: Events, partitions: int = 1, config: StreamConfig = CONFIG) -> MemoryPipeline:
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, clock=lambda: None)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(float("inf"))
    return pipeline


def expected_dcg(levels: list[int]) -> float:
    return dcg([GAINS[level] for level in levels], len(levels))


def mean_dcg(pipeline: MemoryPipeline) -> float:
    summary = summarise(pipeline.windows()[("all", "tail|r1|control")])
    assert summary.sessions == 1
    return float(summary.dcg or 0.0)


def stale(pipeline: MemoryPipeline) -> float:
    return sum(value for c, value in pipeline.counters.items() if c.name == "stale_labels")


# -- the rule itself --------------------------------------------------------------------------------------

def test_merge_grades_keeps_the_latest_ts_and_lets_grades_without_ts_follow_delivery() -> None:
    held, stamps = {"a": 1}, {"a": 20.0}
    assert merge_grades(held, stamps, {"a": 3}, 10.0) == ({"a": 1}, {"a": 20.0}, {}, 1)   # older: loses
    assert merge_grades(held, stamps, {"a": 3}, 20.0) == ({"a": 3}, {"a": 20.0}, {"a": 3}, 0)  # tie: delivery
    assert merge_grades(held, stamps, {"a": 3}, 30.0) == ({"a": 3}, {"a": 30.0}, {"a": 3}, 0)
    assert merge_grades(held, stamps, {"a": 3}, None) == ({"a": 3}, {"a": 20.0}, {"a": 3}, 0)  # no ts: delivery
    assert merge_grades({"a": 1}, {}, {"a": 3}, 5.0) == ({"a": 3}, {"a": 5.0}, {"a": 3}, 0)  # held had no ts
    assert held == {"a": 1} and stamps == {"a": 20.0}  # inputs unchanged


def test_a_record_stored_before_the_stamps_reads_as_without_them() -> None:
    record = SessionRecord("s1", "k", "tail", "r1", "control", 1.0, 3, DOCS, None, 10.0, labels={"a": 3})
    old = json.loads(record.to_json())
    assert "label_ts" not in old and "query_label_ts" not in old  # nothing new stored without ts
    again = SessionRecord.from_json(json.dumps(old))
    assert again.label_ts == {} and again.query_label_ts == {} and again.labels == {"a": 3}
    record.label_ts = {"a": 5.0}
    assert SessionRecord.from_json(record.to_json()).label_ts == {"a": 5.0}


# -- a session's own grades -------------------------------------------------------------------------------

def test_an_old_grade_re_sent_after_its_correction_changes_nothing() -> None:
    pipeline = run([shown("s1"), graded("s1", "a", 0, 100.0), graded("s1", "b", 1, 100.0),
                    graded("s1", "c", 1, 100.0),
                    graded("s1", "a", 3, 200.0),    # the correction
                    graded("s1", "a", 0, 100.0)])   # the producer retries the old grade
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 1]))
    assert mean_dcg(pipeline) != pytest.approx(expected_dcg([0, 1, 1]))
    assert stale(pipeline) == 1
    assert pipeline.counter("stale_labels", "tail|r1|control") == 1


def test_a_correction_delivered_before_the_original_still_wins() -> None:
    pipeline = run([shown("s1"), graded("s1", "b", 1, 1.0), graded("s1", "c", 2, 1.0),
                    graded("s1", "a", 3, 200.0), graded("s1", "a", 0, 100.0)])
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 2]))
    assert stale(pipeline) == 1


def test_a_tie_goes_to_the_later_delivered() -> None:
    base = [shown("s1"), graded("s1", "b", 1, 1.0), graded("s1", "c", 1, 1.0)]
    first = run([*base, graded("s1", "a", 0, 100.0), graded("s1", "a", 3, 100.0)])
    second = run([*base, graded("s1", "a", 3, 100.0), graded("s1", "a", 0, 100.0)])
    assert mean_dcg(first) == pytest.approx(expected_dcg([3, 1, 1]))
    assert mean_dcg(second) == pytest.approx(expected_dcg([0, 1, 1]))
    assert stale(first) == stale(second) == 0


def test_grades_without_ts_follow_delivery_and_keep_the_held_ts() -> None:
    base = [shown("s1"), graded("s1", "b", 1, None), graded("s1", "c", 1, None)]
    later = run([*base, graded("s1", "a", 3, None), graded("s1", "a", 0, None)])
    assert mean_dcg(later) == pytest.approx(expected_dcg([0, 1, 1]))  # as before: the later delivered
    # a grade without ts replaces a ts'd one, but the held ts stays: the old ts'd grade re-sent loses
    mixed = run([*base, graded("s1", "a", 1, 200.0), graded("s1", "a", 3, None), graded("s1", "a", 0, 100.0)])
    assert mean_dcg(mixed) == pytest.approx(expected_dcg([3, 1, 1]))
    assert stale(later) == 0 and stale(mixed) == 1


def test_the_same_grade_with_a_later_ts_still_protects_against_an_older_one() -> None:
    pipeline = run([shown("s1"), graded("s1", "b", 1, 1.0), graded("s1", "c", 1, 1.0),
                    graded("s1", "a", 3, 100.0), graded("s1", "a", 3, 300.0), graded("s1", "a", 0, 200.0)])
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 1]))
    assert stale(pipeline) == 1


# -- early labels -----------------------------------------------------------------------------------------

def test_early_labels_keep_their_ts() -> None:
    pipeline = run([graded("s1", "a", 3, 200.0), graded("s1", "a", 0, 100.0),  # before the impression
                    graded("s1", "b", 1, 1.0), graded("s1", "c", 1, 1.0), shown("s1")])
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 1]))
    assert stale(pipeline) == 1


def test_an_early_label_is_not_undone_by_an_older_grade_after_the_impression() -> None:
    pipeline = run([graded("s1", "a", 3, 200.0), graded("s1", "b", 1, 1.0), graded("s1", "c", 1, 1.0),
                    shown("s1"), graded("s1", "a", 0, 100.0)])
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 1]))
    assert stale(pipeline) == 1


# -- query judgments --------------------------------------------------------------------------------------

@pytest.mark.parametrize("impression_first", [True, False])
def test_a_querys_old_judgment_re_sent_changes_nothing(impression_first: bool) -> None:
    judgments = [judged("q", "a", 0, 100.0), judged("q", "b", 1, 100.0), judged("q", "c", 1, 100.0),
                 judged("q", "a", 3, 200.0), judged("q", "a", 0, 100.0)]
    session = [shown("s1", query="q")]
    pipeline = run([*session, *judgments] if impression_first else [*judgments, *session], partitions=3)
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 1]))
    assert stale(pipeline) == 1  # counted once, at the query's store: a grade that lost is not fanned out
    assert pipeline.query_labels[next(iter(pipeline.query_labels))]["a"] == 3


def test_a_query_correction_delivered_first_wins_for_sessions_before_and_after() -> None:
    pipeline = run([shown("s1", query="q"), judged("q", "b", 1, 1.0), judged("q", "c", 1, 1.0),
                    judged("q", "a", 3, 200.0), judged("q", "a", 0, 100.0),
                    shown("s2", 1010.0, query="q")], partitions=3)
    summary = summarise(pipeline.windows()[("all", "tail|r1|control")])
    assert summary.sessions == 2 and summary.dcg == pytest.approx(expected_dcg([3, 1, 1]))


def test_a_stale_fan_out_cannot_undo_a_sessions_query_grade() -> None:
    """In the worker, fan-outs of two judgments may reach a session in either order (they come from the
    query's store through Kafka): the session keeps the ts of its query grades too."""
    from monitor.core.stream.held_grades import fan_out_annotation

    pipeline = run([shown("s1", query="q"), judged("q", "b", 1, 1.0), judged("q", "c", 1, 1.0),
                    judged("q", "a", 3, 200.0)])
    late = fan_out_annotation("s1", {"a": 0}, FOUR_LEVEL_SCALE, 100.0)  # the older judgment's fan-out, late
    pipeline._queue.append((0, late))
    while pipeline._queue:
        pipeline._process(*pipeline._queue.popleft())
    assert mean_dcg(pipeline) == pytest.approx(expected_dcg([3, 1, 1]))
    assert pipeline.counter("stale_labels", "tail|r1|control") == 1


# -- any delivery order -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("partitions", [1, 3])
def test_any_delivery_order_of_ts_grades_gives_the_numbers_of_ts_order(seed: int, partitions: int) -> None:
    impressions, in_ts_order = ts_stream(seed)
    reference = aggregates(run([*impressions, *in_ts_order], partitions))
    assert reference  # sessions were scored
    rng = random.Random(1000 + seed)
    for _ in range(5):
        events = [*impressions, *in_ts_order]
        rng.shuffle(events)  # annotations before, between and after impressions, in any order
        pipeline = run(events, partitions)
        assert aggregates(pipeline) == reference
    # and the order matters without the rule: the same stream in reverse ts order, ts dropped, differs
    undated = [(t, k, json.dumps({n: v for n, v in json.loads(b).items() if n != "ts"}).encode())
               for t, k, b in reversed(in_ts_order)]
    assert aggregates(run([*impressions, *undated], partitions)) != reference


def test_stale_grades_are_counted_and_exported() -> None:
    from monitor.export.prometheus import RelevanceCollector

    pipeline = run([shown("s1"), graded("s1", "b", 1, 1.0), graded("s1", "c", 1, 1.0),
                    graded("s1", "a", 3, 200.0), graded("s1", "a", 0, 100.0), graded("s1", "a", 1, 150.0),
                    graded("s2", "a", 3, 50.0), graded("s2", "a", 2, 40.0),      # early labels
                    judged("q", "a", 2, 9.0), judged("q", "a", 1, 8.0)])         # a query's judgment
    assert stale(pipeline) == 4
    samples = {s.name: s.value for family in RelevanceCollector(pipeline.snapshot).collect()
               for s in family.samples}
    assert samples["search_relevance_stale_labels_total"] == 4


def test_the_offline_evaluator_reads_jsonl_events_by_the_same_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from monitor.offline.sessions import read_sessions

    lines = [impression("s1", 1000.0, DOCS, query="q"), graded("s1", "a", 3, 200.0)[2],
             graded("s1", "a", 0, 100.0)[2],                     # the old grade re-sent: loses
             graded("s1", "b", 1, 5.0)[2], graded("s1", "b", 2, 5.0)[2],  # a tie: the later line
             graded("s1", "c", 1, 5.0)[2], graded("s1", "c", 3, None)[2],  # no ts: the later line
             judged("q", "d", 2, 50.0)[2], judged("q", "d", 0, 10.0)[2]]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    data = read_sessions([path], FOUR_LEVEL_SCALE)
    assert {d: g.level for d, g in data.session_labels["s1"].items()} == {"a": 3, "b": 2, "c": 3}
    assert {d: g.level for d, g in data.query_labels["q"].items()} == {"d": 2}
    assert data.stale == 2
