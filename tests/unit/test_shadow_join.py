"""Shadow lists through the join (issue 28, items 2 and 3): a sampled session keeps its shadow lists' top k,
asks for the ungraded documents of the union once each, and adds a paired contribution per shadow list that
reaches the coverage minimum to ``bucket|candidate|shadow``, re-scored and taken back with the served one;
checked by hand, against a brute-force recomputation from the simulator's truth, and across partitions."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.canary import paired
from monitor.core.events import Annotation, Impression, Label, Result, ShadowList
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter
from monitor.core.stream.join import step
from monitor.core.stream.session import SessionRecord
from monitor.core.stream.shadow import FOOTING_FIELDS, SENT_FIELDS, paired_fields
from monitor.core.stream.transition import Loaded, Transition
from monitor.sim import SimConfig, simulate
from monitor.store.memory import MemoryPipeline
from tests.support.shadow import Events, Lists, shadow_of, with_lists
from tests.support.simulated import CONFIG, recompute_paired

K3 = StreamConfig(k={"head": 3, "torso": 3, "tail": 3}, budget={"head": 1e9, "torso": 1e9, "tail": 1e9},
                  min_coverage=0.6, share_session_grades=False)
GROUP = "head|cand|shadow"


def results(*docs: str) -> tuple[Result, ...]:
    return tuple(Result(d, i) for i, d in enumerate(docs, 1))


def show(served: tuple[str, ...], *shadow: tuple[str, tuple[str, ...]]) -> Impression:
    return Impression("s1", "q", "r1", 100.0, results(*served), query_bucket="head",
                      shadow=tuple(ShadowList(r, results(*docs)) for r, docs in shadow))


def grade(record: SessionRecord, config: StreamConfig = K3, ts: float = 200.0,
          **levels: int) -> Transition:
    labels = tuple(Label(d, FOUR_LEVEL_SCALE.parse(level)) for d, level in levels.items())
    return step(Annotation(labels, session_id="s1", ts=ts), Loaded(watermark=100.0, record=record), config,
                FOUR_LEVEL_SCALE)


def paired_deltas(t: Transition) -> list[tuple[str, bool, dict[str, float]]]:
    return [(d.group, d.take_back, dict(d.stats)) for d in t.deltas if d.group.endswith("|shadow")]


def gain(level: int) -> float:
    return FOUR_LEVEL_SCALE.parse(level).gain


# -- by hand ---------------------------------------------------------------------------------------------

def test_a_hand_built_session_gives_the_expected_paired_fields() -> None:
    """Served [a, b, c], shadow [c, a, d]; grades a=3, b=0, c=2, d=1 (no scores: the shown order ranks).
    Served: DCG = g3 + g0/log2 3 + g2/2; pairs (a,b), (a,c) concordant, (b,c) discordant. Shadow: DCG =
    g2 + g3/log2 3 + g1/2; (c,a) discordant, (c,d), (a,d) concordant."""
    first = step(show(("a", "b", "c"), ("cand", ("c", "a", "d"))), Loaded(), K3, FOUR_LEVEL_SCALE)
    record = first.records[0]
    assert record.shadow_docs == {"cand": ["c", "a", "d"]} and record.shadow_scores == {"cand": None}
    assert paired_deltas(first) == []
    t = grade(record, a=3, b=0, c=2, d=1)
    x = gain(3) + gain(0) / math.log2(3) + gain(2) / 2
    y = gain(2) + gain(3) / math.log2(3) + gain(1) / 2
    [(group, back, got)] = paired_deltas(t)
    assert (group, back) == (GROUP, False)
    want = {"pair_n": 1, "pair_x": x, "pair_y": y, "pair_xx": x * x, "pair_yy": y * y, "pair_xy": x * y,
            "pair_cx": 2, "pair_dx": 1, "pair_cy": 2, "pair_dy": 1,
            "pair_cx_cx": 4, "pair_cx_dx": 2, "pair_cx_cy": 4, "pair_cx_dy": 2, "pair_dx_dx": 1,
            "pair_dx_cy": 2, "pair_dx_dy": 1, "pair_cy_cy": 4, "pair_cy_dy": 2, "pair_dy_dy": 1,
            "sent_n": 1, "sent_x": x, "sent_xx": x * x,  # sent: what the coverage check reads
            "pair_wx": 0.0, "pair_gx": 1 + 1 / math.log2(3) + 1 / 2,  # every rank graded: nothing waits
            "pair_wy": 0.0, "pair_gy": 1 + 1 / math.log2(3) + 1 / 2}
    assert got == pytest.approx(want, abs=1e-12) and set(got) == set(want)
    assert record.shadow_contributions == {GROUP: got}
    assert (Counter("shadow_scored", GROUP), 1.0) in t.counters
    served = [d for d in t.deltas if d.group == "head|r1|control"]
    assert len(served) == 1 and served[0].stats["dcg"] == pytest.approx(x)
    assert t.sightings == [("shadow", "cand", record.ts)]  # where the canary's reader finds the candidate


def test_a_session_with_a_shadow_list_waits_for_the_union_and_scores_both_lists_together() -> None:
    """Served top k graded, the shadow list's documents not yet: the session stays pending (issue 42: a
    shadow list is not paired before its grades are in, and the served list is not scored without it);
    the shadow's grades complete the union, and both lists are scored in the same step."""
    record = step(show(("a", "b", "c"), ("cand", ("x", "y", "a"))), Loaded(), K3, FOUR_LEVEL_SCALE).records[0]
    waiting = grade(record, a=3, b=1, c=0)
    assert record.status == "pending" and waiting.deltas == [] and record.coverage() == 1.0
    both = grade(record, ts=300.0, x=2, y=0)
    assert record.status == "scored" and [d.group for d in both.deltas] == ["head|r1|control", GROUP]
    assert paired_deltas(both)[0][2]["pair_y"] == pytest.approx(gain(2) + gain(3) / 2)


def test_a_shadow_list_below_the_minimum_pairs_when_a_late_label_lifts_it_and_the_old_pair_is_taken_back(
        ) -> None:
    record = step(show(("a", "b", "c"), ("cand", ("x", "y", "a"))), Loaded(), K3, FOUR_LEVEL_SCALE).records[0]
    grade(record, a=3, b=1, c=0)  # served complete, the union not: pending until the close
    scored = step(Impression("s2", "q2", "r1", 5000.0, results("z")), Loaded(watermark=100.0, due=[record]),
                  K3, FOUR_LEVEL_SCALE)  # closed: served scored; the shadow's coverage 1/3 < 0.6: sent only
    served_dcg = gain(3) + gain(1) / math.log2(3)
    assert record.status == "scored" and paired_deltas(scored) == [
        (GROUP, False, {"sent_n": 1.0, "sent_x": served_dcg, "sent_xx": served_dcg * served_dcg})]
    late = grade(record, ts=300.0, x=2)  # shadow 2/3: paired now (the sent-only contribution taken back)
    [(_, taken, sent), (group, back, added)] = paired_deltas(late)
    assert taken and sent == paired_deltas(scored)[0][2]
    assert (group, back) == (GROUP, False) and added["pair_y"] == pytest.approx(gain(2) + gain(3) / 2)
    assert not [d for d in late.deltas if d.group == "head|r1|control" and d.stats.get("dcg") != scored.deltas[0]
                .stats["dcg"]]  # the served contribution re-scored the same
    fixed = grade(record, ts=400.0, x=0)  # a correction: the old pair taken back, the new one added
    assert paired_deltas(fixed) == [(GROUP, True, added), (GROUP, False, record.shadow_contributions[GROUP])]
    assert record.shadow_contributions[GROUP]["pair_y"] == pytest.approx(gain(3) / 2)
    assert (Counter("shadow_scored", GROUP), 1.0) not in fixed.counters  # only when first added


def test_an_expired_session_has_no_pair_until_a_late_label_scores_it() -> None:
    """A pair exists only while the served list is scored: a session that expires (its served coverage
    below the minimum, its shadow list complete) adds none, and pairs when a late label scores it. (A
    scored session is never expired again, it is re-scored; :func:`_expire` takes any pair back all the
    same, checked directly at the end.)"""
    config = StreamConfig(k={"head": 3, "torso": 3, "tail": 3}, min_coverage=0.6, join_window=10.0,
                          budget={"head": 1e9, "torso": 1e9, "tail": 1e9}, share_session_grades=False)
    record = step(show(("a", "b", "c"), ("cand", ("a", "d", "e"))), Loaded(), config,
                  FOUR_LEVEL_SCALE).records[0]
    pending = grade(record, config, a=1, d=2, e=3)  # shadow complete, served 1/3: nothing scored
    assert record.status == "pending" and paired_deltas(pending) == []
    closed = step(Impression("s2", "q2", "r1", 500.0, results("z")), Loaded(watermark=100.0, due=[record]),
                  config, FOUR_LEVEL_SCALE)
    assert record.status == "expired" and paired_deltas(closed) == [] and not record.shadow_contributions
    late = grade(record, config, ts=600.0, b=0)  # served 2/3 ≥ 0.6: scored, and paired
    [(group, back, added)] = paired_deltas(late)
    assert record.status == "scored" and (group, back) == (GROUP, False) and added["pair_n"] == 1.0
    from monitor.core.stream.join import _expire
    out = Transition(watermark=600.0)
    _expire(record, out)
    assert paired_deltas(out) == [(GROUP, True, added)] and record.shadow_contributions == {}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 50, allow_nan=False), min_size=6, max_size=6))
def test_the_streams_paired_fields_are_the_canarys(values: list[float]) -> None:
    """The stream writes the fields the canary reads (monitor.core.canary.paired), with the same values."""
    x, y, a, b, c, d = values
    got = paired_fields(x, y, (a, b), (c, d))
    assert set(got) == set(paired.FIELDS)
    assert got == pytest.approx(paired.paired_stats(x, y, (a, b), (c, d)), rel=0, abs=0)


# -- the union request -----------------------------------------------------------------------------------

def test_the_request_asks_for_the_union_once_each_and_counts_it() -> None:
    event = show(("a", "b", "c"), ("cand", ("c", "d", "a")), ("cand2", ("e", "d", "b")))
    t = step(event, Loaded(early_labels={"b": 2}), K3, FOUR_LEVEL_SCALE)
    record = t.records[0]
    assert record.union() == ["a", "b", "c", "d", "e"]
    [request] = t.requests
    assert request.docs == ["a", "c", "d", "e"] and request.judged == 1  # b graded early
    assert record.requested_docs() == {"a", "c", "d", "e"}
    assert record.requested == 0b11101  # over the union's order
    counters = dict(t.counters)
    assert counters[Counter("judgments_requested", "head|r1|control")] == 4.0
    assert counters[Counter("judgments_top_k", "head|r1|control")] == 5.0
    received = grade(record, d=1)
    assert dict(received.counters)[Counter("judgments_received", "head|r1|control")] == 1.0


def test_a_served_list_graded_already_waits_for_its_shadow_documents_which_are_asked() -> None:
    t = step(show(("a", "b"), ("cand", ("a", "z"))), Loaded(early_labels={"a": 1, "b": 0}), K3, FOUR_LEVEL_SCALE)
    record = t.records[0]
    assert record.status == "pending" and t.deadlines == {"s1": record.deadline} and t.deltas == []
    assert [r.docs for r in t.requests] == [["z"]]
    both = step(show(("a", "b"), ("cand", ("a", "z"))), Loaded(early_labels={"a": 1, "b": 0, "z": 2}), K3,
                FOUR_LEVEL_SCALE)  # the union graded already: both lists scored at once
    assert both.records[0].status == "scored" and not both.deadlines and len(paired_deltas(both)) == 1


def test_the_budget_in_judgments_costs_the_unions_missing_documents() -> None:
    config = StreamConfig(k={"head": 3, "torso": 3, "tail": 3}, budget_unit="judgments",
                          budget={"head": 1e9, "torso": 1e9, "tail": 1e9})
    t = step(show(("a", "b", "c"), ("cand", ("c", "d", "e"))), Loaded(), config, FOUR_LEVEL_SCALE)
    assert t.budget is not None and t.budget[2] == 5.0


def test_a_record_without_shadow_lists_is_stored_as_before_and_old_records_read() -> None:
    plain = step(show(("a", "b")), Loaded(), K3, FOUR_LEVEL_SCALE).records[0]
    text = plain.to_json()
    assert b"shadow" not in text and SessionRecord.from_json(text) == plain
    shadowed = step(show(("a", "b"), ("cand", ("b", "c"))), Loaded(), K3, FOUR_LEVEL_SCALE).records[0]
    grade(shadowed, a=1, b=2, c=3)
    assert shadowed.shadow_contributions and SessionRecord.from_json(shadowed.to_json()) == shadowed


# -- simulated streams -----------------------------------------------------------------------------------

def with_copy(events: Events) -> Events:
    """Every impression with one shadow list, ``cand``: its served results (documents and scores) copied."""
    out = []
    for topic, key, value in events:
        if topic == "impressions":
            body = json.loads(value)
            body["shadow"] = [{"ranker": "cand", "results": body["results"]}]
            value = json.dumps(body).encode()
        out.append((topic, key, value))
    return out


def two_lists(docs: list[str]) -> Lists:
    """A rotated list (one document beyond the served top k, when there are more) and a reversed one."""
    return [("rot", docs[1:] + docs[:1]), ("rev", docs[::-1])]


def with_pool(events: Events) -> Events:
    """``with_lists(two_lists)`` and a third list, ``pool``: eight documents of the query that other
    sessions showed and this one did not (graded, if at all, by those sessions: shared grades, often
    after this session's own), four documents no session shows (never graded), then the served documents:
    a list that reaches the coverage minimum in some sessions, not in others."""
    shown_for: dict[str, list[str]] = {}
    for topic, _, value in events:
        if topic == "impressions":
            body = json.loads(value)
            shown_for.setdefault(body["query"], []).extend(r["doc_id"] for r in body["results"])
    out = []
    for topic, key, value in with_lists(events, two_lists):
        if topic == "impressions":
            body = json.loads(value)
            docs = [r["doc_id"] for r in body["results"]]
            foreign = [d for d in dict.fromkeys(shown_for[body["query"]]) if d not in docs][:8]
            listed = foreign + [f"unseen-{body['session_id']}-{i}" for i in range(4)] + docs
            body["shadow"].append({"ranker": "pool", "results": [{"doc_id": d, "position": i}
                                                                 for i, d in enumerate(listed, 1)]})
            value = json.dumps(body).encode()
        out.append((topic, key, value))
    return out


def run(events: Events, partitions: int = 1, config: StreamConfig = CONFIG) -> MemoryPipeline:
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, prune_every=10**9,
                              clock=lambda: None)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    pipeline.advance(math.inf)
    return pipeline


def stream(n: int = 300, seed: int = 7):  # type: ignore[no-untyped-def]
    result = simulate(SimConfig(seed=seed, n_sessions=n, bucket_hint_share=1.0))
    return result, [(e.topic, e.key, e.value) for e in result.valid_events]


def paired_totals(pipeline: MemoryPipeline) -> dict[str, dict[str, float]]:
    return {g: dict(s) for g, s in pipeline.snapshot().totals().items() if g.endswith("|shadow")}


def test_a_candidate_equal_to_the_served_list_gives_x_equal_to_y() -> None:
    _, events = stream()
    pipeline = run(with_copy(events))
    totals = paired_totals(pipeline)
    served = {g: s for g, s in pipeline.snapshot().totals().items() if not g.endswith("|shadow")}
    assert set(totals) == {f"{b}|cand|shadow" for b in ("head", "torso", "tail")
                           if any(g.startswith(b) and s.get("sessions") for g, s in served.items())}
    for group, sums in totals.items():
        bucket = group.split("|")[0]
        sessions = sum(s.get("sessions", 0.0) for g, s in served.items() if g.startswith(f"{bucket}|"))
        assert sums["pair_n"] == sessions > 0  # every scored session pairs (the same coverage)
        assert sums["pair_x"] == pytest.approx(sums["pair_y"]) and sums["pair_xx"] == pytest.approx(sums["pair_xy"])
        assert sums["pair_cx"] == sums["pair_cy"] and sums["pair_dx"] == sums["pair_dy"]
    for record in (r for state in pipeline.state for r in state.records.values()):
        for stats in record.shadow_contributions.values():  # per session, not only in sum
            assert stats["pair_x"] == stats["pair_y"] and stats["pair_cx"] == stats["pair_cy"]


@pytest.mark.parametrize("partitions", [1, 4])
def test_paired_sums_equal_a_recomputation_from_final_labels(partitions: int) -> None:
    """Late labels, corrections, query judgments and shared grades re-score; the paired sums in the end
    are those of each session's final grades (brute force over the simulator's truth), in 1 or 4
    partitions alike."""
    result, events = stream()
    shadowed = with_pool(events)
    pipeline = run(shadowed, partitions)
    expected = recompute_paired(result, shadow_of(shadowed))
    got = paired_totals(pipeline)
    assert set(got) == set(expected) and len(expected) >= 6
    for group, want in expected.items():
        assert got[group] == pytest.approx(want, rel=1e-9, abs=1e-9), group
    assert sum(w["pair_n"] for w in expected.values()) > 100
    scored_served = sum(s.get("sessions", 0.0) for g, s in pipeline.snapshot().totals().items()
                        if not g.endswith("|shadow"))
    assert sum(w["pair_n"] for w in expected.values()) < 3 * scored_served  # some (pool) lists below the minimum
    history = pipeline.history().totals()  # the canary's history carries the paired sums per epoch
    for group, want in expected.items():
        assert history[group] == pytest.approx(want, rel=1e-9, abs=1e-9), group
    scored = sum(v for c, v in pipeline.counters.items() if c.name == "shadow_scored")
    assert scored >= sum(w["pair_n"] for w in expected.values())
    rescored = sum(v for c, v in pipeline.counters.items() if c.name == "rescored")
    assert rescored > 0  # late labels did re-score


def test_one_and_four_partitions_give_the_same_paired_totals() -> None:
    _, events = stream(seed=11)
    shadowed = with_pool(events)
    one, four = paired_totals(run(shadowed, 1)), paired_totals(run(shadowed, 4))
    assert one and set(one) == set(four)
    for group in one:
        assert one[group] == pytest.approx(four[group], rel=1e-12, abs=1e-9)


def test_the_exporter_exports_paired_sums_and_counts_and_no_served_gauge_for_a_paired_group() -> None:
    """A paired group (``bucket|candidate|shadow``) has its ``shadow_scored`` counter and its 20 paired sums
    as ``stat_added``/``stat_removed`` (``stat="pair_…"``), whose net equals the paired totals; no gauge
    and no served statistic."""
    from prometheus_client.registry import CollectorRegistry

    from monitor.export.prometheus import RelevanceCollector
    result, events = stream(n=120)
    shadowed = with_lists(events, two_lists)
    pipeline = run(shadowed)
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(pipeline.snapshot))
    samples = [s for m in registry.collect() for s in m.samples]
    group_samples = [s for s in samples if s.labels.get("variant") == "shadow"]
    assert {s.name for s in group_samples} == {"search_relevance_shadow_scored_total", "search_relevance_stat_added_total",
                                        "search_relevance_stat_removed_total"}
    assert {s.labels["ranker"] for s in group_samples} == {"rot", "rev"}
    scored = [s for s in group_samples if s.name == "search_relevance_shadow_scored_total"]
    assert sum(s.value for s in scored) == sum(v for c, v in pipeline.counters.items() if c.name == "shadow_scored")
    net: dict[str, dict[str, float]] = {}
    for s in group_samples:
        if s.name.startswith("search_relevance_stat_"):
            assert s.labels["stat"] in (*paired.FIELDS, *SENT_FIELDS, *FOOTING_FIELDS), s
            sign = 1.0 if s.name == "search_relevance_stat_added_total" else -1.0
            group = net.setdefault(f"{s.labels['bucket']}|{s.labels['ranker']}|shadow", {})
            group[s.labels["stat"]] = group.get(s.labels["stat"], 0.0) + sign * s.value
    want = recompute_paired(result, shadow_of(shadowed))
    assert set(net) == set(want) and want
    for group, sums in want.items():
        assert set(net[group]) == set(sums)
        for field, value in sums.items():
            assert net[group][field] == pytest.approx(value, rel=1e-9, abs=1e-9), (group, field)
