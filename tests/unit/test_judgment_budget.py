"""Fewer judgments per decision (issue 14): requests ask only for what is missing, and the annotation budget
can count judgments (documents to grade) instead of sessions, sampling blind to the arm."""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.core.events import Impression, Result
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import ConfigError, StreamConfig
from monitor.core.stream.join import budget_period, step
from monitor.core.stream.transition import Loaded
from monitor.demo import cli as demo_cli
from monitor.demo import replay_cli
from monitor.demo.settings import DemoSettings, stream_config
from monitor.export.prometheus import RelevanceCollector
from monitor.store.memory import MemoryPipeline, partition_of
from monitor.worker.outbox import request_json
from monitor.worker.settings import SettingsError, load_settings
from tests.support.streams import impression, label, submit_all

ROOT = Path(__file__).resolve().parents[2]
UNLIMITED = {"head": 1e9, "torso": 1e9, "tail": 1e9}


def query_labels(query: str, grades: dict[str, int]) -> bytes:
    return json.dumps({"type": "annotation", "query": query,
                       "grades": [{"doc_id": d, "grade": g} for d, g in grades.items()]}).encode()


# --- part 2: requests for what is missing -------------------------------------------------------------

@pytest.mark.parametrize("unit", ["sessions", "judgments"])
def test_a_request_lists_only_the_unjudged_top_k_and_counts_the_judged(unit: str) -> None:
    config = StreamConfig(k={"head": 40, "torso": 20, "tail": 4}, budget=UNLIMITED, budget_unit=unit)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=2, clock=lambda: None)
    submit_all(pipeline, [
        ("annotations", b"q", query_labels("q", {"a": 3, "c": 0, "x": 2})),  # x: a judged doc not shown
        ("annotations", b"s1", label("s1", "d", 1)),                         # s1's own, before its impression
        ("annotations", b"s1", label("s1", "f", 2)),                         # shown below the top k
        ("impressions", b"s1", impression("s1", 1000, ["a", "b", "c", "d", "e", "f"], query="q")),
    ])
    [request] = pipeline.requests
    assert (request.session_id, request.k, request.docs, request.judged) == ("s1", 4, ["b"], 3)
    published = json.loads(request_json(request))
    assert published["doc_ids"] == ["b"] and published["judged"] == 3 and published["k"] == 4
    assert published["type"] == "annotation_request" and published["query"] == "q"
    assert pipeline.counter("judgments_requested", "tail|r1|control") == 1
    assert pipeline.counter("sampled", "tail|r1|control") == 1


def test_a_request_in_rank_order_and_a_session_with_nothing_judged_asks_for_its_whole_top_k() -> None:
    pipeline = MemoryPipeline(StreamConfig(budget=UNLIMITED), FOUR_LEVEL_SCALE, clock=lambda: None)
    docs = [f"d{i}" for i in range(30)]
    pipeline.submit("annotations", b"s1", label("s1", "d3", 2))
    pipeline.submit("impressions", b"s1", impression("s1", 1000, docs, bucket="torso"))
    pipeline.submit("impressions", b"s2", impression("s2", 1000, docs, bucket="torso"))
    first, second = pipeline.requests
    assert first.docs == [d for d in docs[:20] if d != "d3"] and first.judged == 1
    assert second.docs == docs[:20] and second.judged == 0 and second.k == 20


@pytest.mark.parametrize("unit", ["sessions", "judgments"])
@pytest.mark.parametrize("source", ["query", "early", "both"])
def test_a_fully_judged_session_is_scored_without_a_request(unit: str, source: str) -> None:
    config = StreamConfig(budget={"head": 0, "torso": 0, "tail": 50} if unit == "judgments" else UNLIMITED,
                          budget_unit=unit)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    events = []
    if source in ("query", "both"):
        events.append(("annotations", b"q", query_labels("q", {"a": 3, "b": 1} if source == "query" else {"a": 3})))
    if source in ("early", "both"):
        events += [("annotations", b"s1", label("s1", "b", 1))] + (
            [("annotations", b"s1", label("s1", "a", 3))] if source == "early" else [])
    events.append(("impressions", b"s1", impression("s1", 1000, ["a", "b"], query="q")))
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    group = "tail|r1|control"
    assert list(pipeline.requests) == []
    assert pipeline.counter("sampled", group) == 1 and pipeline.counter("scored", group) == 1
    assert pipeline.counter("judgments_requested", group) == 0
    assert sum(s.budget.get(("tail", budget_period(1000, config)), 0.0) for s in pipeline.state) == (
        0.0 if unit == "judgments" else 1.0)  # sessions mode: a session is a session, whatever its query has
    assert pipeline.windows()[("1h", group)]["dcg"] == pytest.approx(1.0 + 0.3 / math.log2(3))


def test_judgments_received_count_first_grades_of_requested_documents_only() -> None:
    config = StreamConfig(join_window=100, budget=UNLIMITED)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    group = "tail|r1|control"
    submit_all(pipeline, [
        ("annotations", b"q", query_labels("q", {"a": 3})),
        ("impressions", b"s1", impression("s1", 1000, ["a", "b", "c", "d"], query="q")),  # asks b, c, d
        ("annotations", b"s1", label("s1", "b", 1)),   # received
        ("annotations", b"s1", label("s1", "b", 1)),   # a duplicate: not again
        ("annotations", b"s1", label("s1", "b", 2)),   # a correction: not again
        ("annotations", b"s1", label("s1", "a", 2)),   # not asked for (its query's grade was known)
        ("annotations", b"s1", label("s1", "z", 2)),   # not shown
        ("annotations", b"q", query_labels("q", {"c": 0})),  # a query judgment covers c: not an annotator's
        ("annotations", b"s1", label("s1", "c", 0)),   # ... but the session's own grade for c still came
        ("impressions", b"s2", impression("s2", 5000, ["e"], query="other")),  # closes s1: d never came
    ])
    assert pipeline.counter("judgments_requested", group) == 3 + 1
    assert pipeline.counter("judgments_received", group) == 2
    assert pipeline.counter("corrections", group) == 2  # b, and a (the session's own grade over its query's)


def test_judgment_counters_are_exported_per_bucket_ranker_and_variant() -> None:
    pipeline = MemoryPipeline(StreamConfig(budget=UNLIMITED), FOUR_LEVEL_SCALE, clock=lambda: None)
    submit_all(pipeline, [
        ("impressions", b"s1", impression("s1", 1000, ["a", "b", "c"], bucket="head", variant="canary")),
        ("annotations", b"s1", label("s1", "a", 3)),
        ("impressions", b"s2", impression("s2", 1000, ["a", "b"], bucket="tail")),
    ])
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(pipeline.snapshot))
    head = {"bucket": "head", "ranker": "r1", "variant": "canary"}
    tail = {"bucket": "tail", "ranker": "r1", "variant": "control"}
    assert registry.get_sample_value("search_relevance_judgments_requested_total", head) == 3
    assert registry.get_sample_value("search_relevance_judgments_received_total", head) == 1
    assert registry.get_sample_value("search_relevance_judgments_requested_total", tail) == 2
    assert registry.get_sample_value("search_relevance_judgments_received_total", tail) is None
    documented = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    for name in ("search_relevance_judgments_requested_total", "search_relevance_judgments_received_total"):
        assert f"| `{name}` | counter | same |" in documented


# --- part 3: a budget in judgments --------------------------------------------------------------------

def test_budget_unit_is_validated_and_sessions_by_default() -> None:
    assert StreamConfig().budget_unit == "sessions"
    with pytest.raises(ConfigError, match="budget_unit must be one of sessions, judgments, got 'documents'"):
        StreamConfig(budget_unit="documents")


def test_the_worker_reads_budget_unit_from_the_stream_table(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text('[stream]\nbudget = { head = 900, torso = 300, tail = 300 }\nbudget_unit = "judgments"\n')
    settings = load_settings({}, path)
    assert settings.stream.budget_unit == "judgments" and settings.stream.budget["head"] == 900
    assert load_settings({}).stream.budget_unit == "sessions"
    path.write_text('[stream]\nbudget_unit = "docs"\n')
    with pytest.raises(SettingsError, match=r"\[stream\] budget_unit must be one of sessions, judgments"):
        load_settings({}, path)


def test_docs_name_every_stream_setting() -> None:
    """docs/worker.md's ``[stream]`` paragraph names every field of StreamConfig (the keys [stream] takes)."""
    text = (ROOT / "docs" / "worker.md").read_text(encoding="utf-8")
    paragraph = text.split("`[stream]` (file only)", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert set(StreamConfig.__dataclass_fields__) <= named


def paced(share: float, ts: float, config: StreamConfig) -> float:
    """The reference allowance: ``share`` paced over the period of ``ts``, with one unit of burst."""
    start = math.floor(ts / config.budget_period) * config.budget_period
    return min(share, share * (ts - start) / config.budget_period + 1.0)


def stream_of_costs(seed: int, sessions: int, partitions: int) -> tuple[list[tuple[str, bytes, bytes]],
                                                                       list[dict[str, object]]]:
    """Impressions in three buckets over three budget periods, each with some early labels, so that
    sessions cost from 0 to k judgments; and what each one is (for the reference)."""
    rng = random.Random(seed)
    config = StreamConfig()
    events: list[tuple[str, bytes, bytes]] = []
    sessions_out: list[dict[str, object]] = []
    for i in range(sessions):
        sid = f"s{i}"
        bucket = rng.choice(["head", "torso", "tail"])
        docs = [f"d{i}-{j}" for j in range(rng.randint(1, 45))]
        early = {d for d in docs if rng.random() < rng.choice([0.0, 0.5, 1.0])}
        for doc in sorted(early):
            events.append(("annotations", sid.encode(), label(sid, doc, 2)))
        ts = 1000.0 + i * 3 * 3600.0 / sessions
        events.append(("impressions", sid.encode(), impression(sid, ts, docs, bucket)))
        top = docs[:config.k[bucket]]
        sessions_out.append({"sid": sid, "bucket": bucket, "ts": ts, "partition": partition_of(sid.encode(), partitions),
                             "cost": sum(d not in early for d in top)})
    return events, sessions_out


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_judgments_budget_spends_its_share_per_bucket_period_and_partition(partitions: int) -> None:
    budget = {"head": 600.0, "torso": 0.0, "tail": 250.0}
    config = StreamConfig(budget=budget, budget_unit="judgments", budget_period=3600)
    events, sessions = stream_of_costs(7, 1500, partitions)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, partitions=partitions, prune_every=10**9, clock=lambda: None)  # keep every period
    for topic, key, value in events:
        pipeline.submit(topic, key, value)

    # the reference: per partition, bucket and period, in arrival order, sampled while spent is below the
    # share paced to the session's ts
    spent: Counter[tuple[int, str, int]] = Counter()
    last: dict[tuple[int, str, int], int] = {}
    refused: set[tuple[int, str, int]] = set()
    want: set[str] = set()
    for s in sessions:
        bucket, cost, ts = str(s["bucket"]), int(s["cost"]), float(s["ts"])
        slot = (int(s["partition"]), bucket, budget_period(ts, config))
        allowed = paced(budget[bucket] / partitions, ts, config)
        if spent[slot] < allowed:
            want.add(str(s["sid"]))
            spent[slot] += cost
            last[slot] = cost
        else:
            assert spent[slot] >= allowed  # refused only once the allowance at its ts was spent
            refused.add(slot)
    assert {sid for state in pipeline.state for sid in state.records} == want
    for slot in set(spent) | refused:
        partition, bucket, period = slot
        share, amount = budget[bucket] / partitions, spent[slot]
        assert pipeline.state[partition].budget.get((bucket, period), 0.0) == amount
        if slot in last:  # a hard cap: the last session sampled found the spend below the share
            assert amount - last[slot] < share
            assert amount < share + config.k[bucket]  # so at most one session's cost over it
    assert len(refused) >= 2 * len(budget) * partitions  # the budget binds in most periods
    assert not any(bucket == "torso" for _, bucket, _ in spent)  # budget 0: nothing sampled
    # what was spent is what was requested, per bucket
    for bucket in budget:
        requested = pipeline.counter("judgments_requested", f"{bucket}|r1|control")
        assert requested == sum(v for (_, b, _), v in spent.items() if b == bucket)
        assert requested == sum(len(r.docs) for r in pipeline.requests if r.bucket == bucket)
    assert 0 < len(want) < len(sessions) / 2


def test_the_sessions_budget_is_unchanged_by_what_is_judged() -> None:
    """Sessions mode: a session costs one, whatever it asks for."""
    config = StreamConfig(budget={"head": 0, "torso": 0, "tail": 4})
    events, sessions = stream_of_costs(3, 60, 1)
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    for topic, key, value in events:
        pipeline.submit(topic, key, value)
    tails = [s for s in sessions if s["bucket"] == "tail"]
    per_period: Counter[int] = Counter()
    want = set()
    for s in tails:
        ts = float(s["ts"])
        period = budget_period(ts, config)
        if per_period[period] < paced(4.0, ts, config):
            per_period[period] += 1
            want.add(s["sid"])
    assert {sid for sid in pipeline.state[0].records} == want
    assert 0 < len(want) < len(tails)  # the budget binds


def arm_impression(sid: str, ts: float, arm: str, query: str = "q") -> Impression:
    docs = [f"judged-{j}" for j in range(20)] if arm == "judged" else [f"{sid}-new-{j}" for j in range(20)]
    variant = "control" if arm == "judged" else "canary"
    results = tuple(Result(d, j + 1, 1.0 - j / 100) for j, d in enumerate(docs))
    return Impression(sid, query, arm, ts, results, variant=variant, query_bucket="head")


@pytest.mark.parametrize("unit", ["sessions", "judgments"])
def test_the_sampling_decision_never_reads_the_arm_or_its_documents(unit: str) -> None:
    """For any budget state, an impression of the ranker that shows judged documents (free) and one of the
    ranker that shows new ones (20 judgments) at the same time in the same bucket get the same decision."""
    config = StreamConfig(budget={"head": 100, "torso": 100, "tail": 100}, budget_unit=unit)
    judged = {f"judged-{j}": 2 for j in range(20)}
    rng = random.Random(1)
    decisions = Counter()
    for trial in range(400):
        used = rng.choice([0.0, 50.0, 99.0, 99.9, 100.0, 100.1, 180.0, rng.uniform(0, 200)])
        partitions = rng.choice([1, 2, 4])
        with_query = rng.random() < 0.3
        outcomes = []
        for arm in ("judged", "fresh"):
            loaded = Loaded(budget_used={"head": used}, query_labels=dict(judged) if with_query else {},
                            early_labels=dict(judged) if arm == "judged" and not with_query else {})
            t = step(arm_impression(f"t{trial}-{arm}", 5000.0, arm), loaded, config, FOUR_LEVEL_SCALE, partitions)
            outcomes.append(any(counter.name == "sampled" for counter, _ in t.counters))
        assert outcomes[0] == outcomes[1], (used, partitions, with_query)
        decisions[outcomes[0]] += 1
    assert decisions[True] > 50 and decisions[False] > 50


def test_two_rankers_one_showing_judged_documents_are_sampled_at_equal_rates() -> None:
    """The ranker that shows documents its query's judgments already cover costs nothing; the other costs
    20 judgments a session. A judgments budget that binds samples both at the same rate (whether a session
    is sampled is decided from its time and the spend before it, whatever its arm), while a sampler that
    let sessions in by their cost would take nearly all of the cheap ranker's and few of the other's."""
    config = StreamConfig(budget={"head": 2000, "torso": 0, "tail": 0}, budget_unit="judgments")
    pipeline = MemoryPipeline(config, FOUR_LEVEL_SCALE, clock=lambda: None)
    pipeline.submit("annotations", b"q", query_labels("q", {f"judged-{j}": 2 for j in range(20)}))
    rng = random.Random(4)
    arms: dict[str, str] = {}
    order: dict[int, list[str]] = {}
    for i in range(8000):  # 10 budget periods of 800 sessions, half of each arm at random
        arm = "judged" if rng.random() < 0.5 else "fresh"
        sid, ts = f"s{i}", 1000.0 + i * 4.5
        arms[sid] = arm
        order.setdefault(budget_period(ts, config), []).append(sid)
        event = arm_impression(sid, ts, arm)
        value = json.dumps({"type": "impression", "session_id": sid, "query": "q", "query_bucket": "head",
                            "ranker": event.ranker, "variant": event.variant, "ts": ts,
                            "results": [{"doc_id": r.doc_id, "position": r.position, "score": r.score}
                                        for r in event.results]}).encode()
        pipeline.submit("impressions", sid.encode(), value)
    sampled = set(pipeline.state[0].records)
    times = {f"s{i}": 1000.0 + i * 4.5 for i in range(8000)}
    for sids in order.values():  # decided from the time and the spend before it: the arm is only its cost
        used, want = 0.0, []
        for sid in sids:
            if used < paced(2000.0, times[sid], config):
                want.append(sid)
                used += 0.0 if arms[sid] == "judged" else 20.0
        assert [sid for sid in sids if sid in sampled] == want
    rate = {arm: sum(s in sampled for s, a in arms.items() if a == arm) / sum(a == arm for a in arms.values())
            for arm in ("judged", "fresh")}
    assert 0.2 < rate["fresh"] < 0.3 and 0.87 < rate["judged"] / rate["fresh"] < 1.15, rate
    assert pipeline.counter("sampled", "head|judged|control") + pipeline.counter("sampled", "head|fresh|canary") \
        == len(sampled)

    # the bias avoided: let a session in when its own cost still fits the period's budget
    spent: Counter[int] = Counter()
    greedy = set()
    for period, sids in order.items():
        for sid in sids:
            cost = 0 if arms[sid] == "judged" else 20
            if spent[period] + cost <= 2000:
                spent[period] += cost
                greedy.add(sid)
    biased = {arm: sum(s in greedy for s, a in arms.items() if a == arm) / sum(a == arm for a in arms.values())
              for arm in ("judged", "fresh")}
    assert biased["judged"] == 1.0 and biased["fresh"] < 0.3


# --- the demo and replay take the setting --------------------------------------------------------------

def test_demo_and_replay_take_the_budget_and_its_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = demo_cli.build_parser().parse_args(["--budget", "500", "--budget-unit", "judgments"])
    assert (args.budget, args.budget_unit) == (500.0, "judgments")
    settings = DemoSettings(budget=args.budget, budget_unit=args.budget_unit)
    assert settings.stream_config() == stream_config(500, "judgments")
    assert settings.stream_config().budget == {"head": 500, "torso": 500, "tail": 500}
    assert DemoSettings().stream_config() == StreamConfig()
    with pytest.raises(ValueError, match="budget_unit"):
        DemoSettings(budget_unit="documents")
    with pytest.raises(ValueError, match=r"budget\[head\] must be a number ≥ 0"):
        DemoSettings(budget=-1.0)

    half = 1763712000 + 1800  # half an hour into the period: an allowance of 3 · 0.5 + 1 = 2.5 judgments
    lines = [query_labels("q", {"a": 3}).decode(),
             impression("s1", half, ["a", "b", "c"], query="q").decode(),
             impression("s2", half + 1, ["a", "d", "e"], query="q").decode(),
             impression("s3", half + 2, ["a", "f"], query="q").decode(),
             label("s1", "b", 2).decode(), label("s1", "c", 0).decode()]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert replay_cli.main([str(path), "--json", "--budget", "3", "--budget-unit", "judgments"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # s1 asks for b, c (2 < 2.5: s2 is sampled too and asks for d, e; then 4 ≥ 2.5: s3 is not)
    assert summary["sessions"]["sampled"] == 2
    assert summary["judgments"] == {"requested": 4, "received": 2, "top_k": 6}
    assert summary["budget"] == {"per_bucket": {"head": 3, "torso": 3, "tail": 3}, "unit": "judgments",
                                 "period": 3600.0}
    assert replay_cli.main([str(path)]) == 0
    text = capsys.readouterr().out
    assert ("judgments: 5 requested (38% of the sampled sessions' 8 top-k documents already graded), 2 received "
            "(budget 2,000 sessions per bucket per hour)") in text
    assert replay_cli.main([str(path), "--budget", "-2"]) == 2
    assert "--budget" in capsys.readouterr().err
