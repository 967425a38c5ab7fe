"""Typed statistics (issue 27): :class:`Stats` adds, merges and takes back field-wise, its typed views equal
what the raw per-session values give, and a take-back is routed by the join's explicit flag, never guessed
from the sign of a field."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.aggregates import Z_95, Mean, PairAggregate
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.judged import JudgedList
from monitor.core.metrics import dcg, ndcg, reciprocal_rank
from monitor.core.metrics.pairs import PairCounts
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.effects import Aggregates
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.stats import FIELDS, Stats, session_stats, summarise
from monitor.core.stream.transition import Delta, Transition
from monitor.store import memory
from monitor.store.memory import MemoryPipeline

GROUP = "tail|r1|control"
NAMES = ("sessions", "dcg", "dcg_sq", "concordant", "expired")

# Multiples of 2⁻⁸ below 2¹⁶: their sums and differences are exact in a double, so associativity and the
# inverse hold bit for bit (on arbitrary floats they hold only up to rounding, as in any sum).
dyadic = st.integers(-(2**24), 2**24).map(lambda i: i / 256.0)
stats_strategy = st.dictionaries(st.sampled_from(NAMES), dyadic, max_size=len(NAMES)).map(Stats)


@given(stats_strategy, stats_strategy, stats_strategy)
def test_add_is_associative_and_commutative_where_exact(a: Stats, b: Stats, c: Stats) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a


@given(stats_strategy, stats_strategy)
def test_take_back_is_the_exact_inverse_of_add(a: Stats, b: Stats) -> None:
    both = a + b
    back = both - b
    assert back == {name: a.get(name, 0.0) for name in back}  # a field only b had is back at 0
    in_place = Stats(a)
    in_place.add(b)
    in_place.take_back(b)
    assert in_place == back


def test_operators_return_new_stats_and_in_place_methods_mutate() -> None:
    a, b = Stats({"sessions": 1.0, "dcg": 2.0}), Stats({"dcg": 0.5, "rr": 1.0})
    total = a + b
    assert isinstance(total, Stats) and isinstance(total - b, Stats) and isinstance(a.copy(), Stats)
    assert total == {"sessions": 1.0, "dcg": 2.5, "rr": 1.0}
    assert a == {"sessions": 1.0, "dcg": 2.0} and b == {"dcg": 0.5, "rr": 1.0}  # operands untouched
    a.merge(b)
    assert a == total
    a.take_back(b)
    assert a == {"sessions": 1.0, "dcg": 2.0, "rr": 0.0}


def test_wire_form_is_the_flat_mapping() -> None:
    """JSON (session records) and a plain dict read back from a store see the same flat field sums."""
    stats = Stats({"sessions": 1.0, "dcg": 1.5})
    assert json.loads(json.dumps(stats)) == {"sessions": 1.0, "dcg": 1.5} == stats
    record = SessionRecord("s", "q", "tail", "r1", "control", 0.0, 10, ["a"], None, 1.0, contribution=stats)
    assert SessionRecord.from_json(record.to_json()).contribution == stats


def _judged(rng: np.random.Generator, n: int) -> JudgedList:
    docs = [f"d{i}" for i in range(n)]
    grades = {d: FOUR_LEVEL_SCALE.parse(int(rng.integers(0, 4))) for d in docs if rng.random() < 0.8}
    return JudgedList.build(docs, list(rng.random(n).round(1)), grades, 3.0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 20))
def test_session_stats_measures_equal_the_metric_functions(seed: int, k: int) -> None:
    judged = _judged(np.random.default_rng(seed), 20)
    stats = session_stats(judged, k)
    assert stats["dcg"] == dcg(judged.gains, k)  # bit for bit: the measures compute the same functions
    assert stats["ndcg"] == ndcg(judged.gains, judged.pool_gains, k)
    assert stats["rr"] == reciprocal_rank(judged.relevant, k)
    assert isinstance(stats, Stats)


def test_typed_views_and_summary_equal_the_raw_values() -> None:
    """Fold many sessions' stats; the views and the summary equal numpy/statistics on the raw values."""
    rng = np.random.default_rng(7)
    sessions = [session_stats(_judged(rng, 20), 10) for _ in range(200)]
    total = Stats()
    for one in sessions:
        total.add(one)
    values = [s["dcg"] for s in sessions]
    mean = total.mean("dcg")
    assert mean.n == 200 and mean.total == pytest.approx(math.fsum(values))
    assert mean.get() == pytest.approx(statistics.fmean(values))
    assert mean.variance() == pytest.approx(statistics.variance(values))
    counts = sum((PairCounts(int(s["concordant"]), int(s["discordant"]), int(s["grade_tied"]),
                             int(s["score_tied"])) for s in sessions), PairCounts())
    assert total.pairs() == PairAggregate(counts, 200)
    summary = summarise(dict(total))  # a plain dict, as a store reads it, gives the same summary
    assert summary == summarise(total)
    half = Z_95 * statistics.stdev(values) / math.sqrt(200)
    assert summary.dcg_ci == pytest.approx((statistics.fmean(values) - half, statistics.fmean(values) + half))
    assert summary.ndcg == pytest.approx(statistics.fmean(s["ndcg"] for s in sessions))
    assert summary.rr == pytest.approx(statistics.fmean(s["rr"] for s in sessions))
    assert summary.pairs == counts
    assert summary.pnr == counts.pnr("positive") and summary.pnr_skip_ties == counts.pnr("skip")
    assert summary.join_lag is None  # no session carried one


def test_views_of_a_take_back_are_the_aggregates_take_back() -> None:
    a = Stats({"sessions": 3.0, "dcg": 6.0, "dcg_sq": 14.0, "concordant": 5.0, "discordant": 2.0})
    b = Stats({"sessions": 1.0, "dcg": 1.0, "dcg_sq": 1.0, "concordant": 1.0, "discordant": 1.0})
    assert (a - b).mean("dcg") == a.mean("dcg") - b.mean("dcg") == Mean(2, 5.0, 13.0)
    assert (a - b).pairs() == a.pairs() - b.pairs() == PairAggregate(PairCounts(4, 1), 2)


def test_mean_and_pair_aggregate_revert_exactly() -> None:
    mean = Mean.of([1.5, 2.25, 4.0])
    mean.revert(2.25)
    assert mean == Mean.of([1.5, 4.0])
    merged = Mean.of([1.0, 2.0]) + Mean.of([3.5])
    merged.take_back(Mean.of([3.5]))
    assert merged == Mean.of([1.0, 2.0])
    pairs = PairAggregate()
    pairs.update(PairCounts(3, 1, 2, 0))
    pairs.update(PairCounts(1, 4, 0, 1))
    pairs.revert(PairCounts(1, 4, 0, 1))
    assert pairs == PairAggregate(PairCounts(3, 1, 2, 0), 1)
    pairs.take_back(PairAggregate(PairCounts(3, 1, 2, 0), 1))
    assert pairs == PairAggregate() and pairs.get() is None


def _fold(*deltas: Delta) -> Aggregates:
    aggregates = Aggregates()
    config = StreamConfig()
    for delta in deltas:
        aggregates.add(Transition(0.0, deltas=[delta]), config)
    return aggregates


def _window(aggregates: Aggregates, window: str = "1h") -> Stats:
    out = Stats()
    for (name, _), groups in aggregates.slices.items():
        if name == window:
            out.add(groups.get(GROUP, {}))
    return out


def test_a_negative_delta_that_is_not_a_take_back_is_added() -> None:
    """The old guess (sessions + expired < 0 means a take-back) would have sent this to ``removed``."""
    odd = Stats({"sessions": -1.0, "dcg": 2.0})
    aggregates = _fold(Delta(10.0, GROUP, odd))
    assert aggregates.added == {GROUP: odd} and aggregates.removed == {}
    assert _window(aggregates) == odd and aggregates.epochs[0][GROUP] == odd


def test_a_take_back_without_a_count_field_is_removed() -> None:
    """A take-back whose fields hold no session count (the guess saw 0, not < 0, and added it)."""
    added, back = Stats({"sessions": 1.0, "dcg": 2.0}), Stats({"dcg": 2.0})
    aggregates = _fold(Delta(10.0, GROUP, added), Delta(10.0, GROUP, back, take_back=True))
    assert aggregates.added == {GROUP: added} and aggregates.removed == {GROUP: back}
    assert _window(aggregates) == {"sessions": 1.0, "dcg": 0.0}  # the signed sum, added − taken back
    assert aggregates.epochs[0][GROUP] == {"sessions": 1.0, "dcg": 0.0}


def _event(value: dict[str, Any], topic: str, key: str) -> tuple[str, bytes, bytes]:
    return topic, key.encode(), json.dumps(value, ensure_ascii=False).encode()


def test_a_rescored_session_shows_its_old_contribution_in_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A correction re-scores a session: the join emits its old contribution as an explicit take-back,
    which ``removed`` holds exactly; ``added`` holds both scorings and the windows their difference."""
    transitions: list[Transition] = []
    real_step = memory.step

    def recording_step(*args: Any) -> Transition:
        transitions.append(real_step(*args))
        return transitions[-1]

    monkeypatch.setattr(memory, "step", recording_step)
    pipeline = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, clock=lambda: None)
    results = [{"doc_id": d, "position": i + 1, "score": 10.0 - i} for i, d in enumerate("abc")]
    impression = {"type": "impression", "session_id": "s", "query": "q", "query_bucket": "tail",
                  "ranker": "r1", "variant": "control", "ts": 100.0, "results": results}
    pipeline.submit(*_event(impression, "impressions", "s"))
    for doc, grade in (("a", "高"), ("b", "低"), ("c", "中")):
        pipeline.submit(*_event({"type": "annotation", "session_id": "s", "doc_id": doc, "grade": grade},
                                "annotations", "s"))
    first = pipeline.state[0].records["s"].contribution
    assert first is not None and first["sessions"] == 1.0
    first = dict(first)
    pipeline.submit(*_event({"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "无"},
                            "annotations", "s"))
    second = pipeline.state[0].records["s"].contribution
    assert second is not None and second["dcg"] < first["dcg"]

    taken = [d for t in transitions for d in t.deltas if d.take_back]
    assert len(taken) == 1 and taken[0].stats == first and taken[0].group == GROUP
    query_taken = [d for t in transitions for d in t.query_deltas if d.take_back]
    assert [d.stats for d in query_taken] == [{"n": 1.0, "x": first["dcg"], "xx": first["dcg_sq"]}]
    aggregates = pipeline.aggregates[0]
    assert aggregates.removed == {GROUP: first}
    assert aggregates.added[GROUP] == Stats(first) + second
    window = pipeline.windows()[("1h", GROUP)]
    assert set(window) >= set(FIELDS) - {"expired", "expired_coverage"}
    assert window == pytest.approx(Stats(first) + second - first)
    assert summarise(window).sessions == 1 and summarise(window).dcg == pytest.approx(second["dcg"])
