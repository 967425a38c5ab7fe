"""The bridge's rater-quality policy on Label Studio annotations (monitor/annotate/ratings.py), its settings
and its gauges, against brute-force references: the median computed by sorting, agreement counted by
``RaterTally.add_unit`` directly, kappa and alpha recomputed from the raw pairs."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.annotate.metrics import BridgeMetrics
from monitor.annotate.ratings import (
    LEVEL_OF,
    NAME_OF,
    bucket_of,
    choice,
    contribution,
    in_overlap,
    ratings,
    wanted_overlap,
)
from monitor.annotate.settings import load_annotate_settings
from monitor.annotate.tasks import GradeGiven, pair_key
from monitor.core.agreement.identity import annotator_label
from monitor.core.agreement.tally import RaterTally, RaterThresholds
from monitor.worker.settings import SettingsError

BASE = {"MONITOR_LABEL_STUDIO_URL": "http://127.0.0.1:8080", "MONITOR_LABEL_STUDIO_TOKEN": "t",
        "MONITOR_ANNOTATE_SECRET": "s"}


def annotation(ident: int, grade: str, second: int, who: int | None) -> dict[str, Any]:
    return {"id": ident, "completed_by": who, "updated_at": f"2026-11-24T10:{second // 60:02d}:{second % 60:02d}Z",
            "result": [{"from_name": "grade", "to_name": "query", "type": "choices",
                        "value": {"choices": [grade]}}]}


annotations_strategy = st.lists(
    st.tuples(st.sampled_from(list(LEVEL_OF)), st.integers(0, 3599), st.integers(1, 4)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(annotations_strategy, st.randoms(use_true_random=False))
def test_the_chosen_grade_is_the_lower_median_of_each_annotators_latest_whatever_the_order(
        rows: list[tuple[str, int, int]], rng: random.Random) -> None:
    given_ = [annotation(i + 1, grade, second, who) for i, (grade, second, who) in enumerate(rows)]
    latest: dict[int, tuple[int, int, str]] = {}  # brute force: per annotator the max (time, id)
    for i, (grade, second, who) in enumerate(rows):
        if who not in latest or (second, i + 1) > latest[who][:2]:
            latest[who] = (second, i + 1, grade)
    shuffled = rng.sample(given_, len(given_))
    chosen = choice(ratings(shuffled))
    if not latest:
        assert chosen is None
        return
    levels = sorted(LEVEL_OF[g] for _, _, g in latest.values())
    assert chosen is not None and chosen.grade == NAME_OF[levels[(len(levels) - 1) // 2]]
    assert chosen == choice(ratings(given_))  # the order of delivery changes nothing
    first_ids = {who: min(i + 1 for i, (_, _, w) in enumerate(rows) if w == who) for who in latest}
    assert [g.annotator for g in ratings(shuffled)] == sorted(latest, key=lambda w: first_ids[w])


def test_one_annotator_correcting_themselves_is_a_correction_two_annotators_give_the_lower() -> None:
    alone = [annotation(1, "低", 0, 7), annotation(2, "高", 60, 7)]
    assert choice(ratings(alone)).grade == "高"  # type: ignore[union-attr]
    two = [annotation(1, "高", 0, 7), annotation(2, "中", 60, 8)]
    assert choice(ratings(two)).grade == "中"  # type: ignore[union-attr]
    three = [*two[:1], annotation(2, "无", 60, 8), annotation(3, "中", 120, 9)]
    assert wanted_overlap(True, ratings(three[:2])) == 3
    assert choice(ratings(three)).grade == "中"  # type: ignore[union-attr]
    assert choice(ratings(three)).ts == max(g.ts for g in ratings(three))  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=4), st.lists(
    st.tuples(st.sampled_from(list(LEVEL_OF)), st.integers(1, 6)), min_size=1, max_size=4)), max_size=40))
def test_agreement_is_counted_on_the_first_two_annotators_of_overlapped_pairs_only(
        tasks: list[tuple[str, list[tuple[str, int]]]]) -> None:
    summed, reference = RaterTally(4), RaterTally(4)
    for doc, rows in tasks:
        grades = [GradeGiven(i + 1, grade, float(i), who) for i, (grade, who) in enumerate(rows)]
        per = ratings([annotation(g.annotation_id, g.grade, i, g.annotator) for i, g in enumerate(grades)])
        key = pair_key("q", doc)
        overlapped = in_overlap(key, 0.5)
        summed.merge(contribution(per, bucket="head", overlapped=overlapped, known=None))
        if overlapped and len(per) >= 2:
            reference.add_unit("head", {str(per[0].annotator): LEVEL_OF[per[0].grade],
                                        str(per[1].annotator): LEVEL_OF[per[1].grade]})
    assert summed == reference
    assert RaterTally.from_fields(4, summed.fields()) == summed


def test_a_gold_tasks_grades_count_against_the_known_grade_never_as_agreement() -> None:
    grades = [GradeGiven(1, "低", 1.0, 5), GradeGiven(2, "高", 2.0, 6)]
    tally = contribution(grades, bucket="head", overlapped=True, known=LEVEL_OF["高"])
    assert tally.buckets == {} and tally.peers == {}
    assert tally.gold["5"].exact_share() == 0.0 and tally.gold["6"].exact_share() == 1.0


def test_the_overlap_share_is_a_stable_share_of_pairs() -> None:
    keys = [pair_key("q", f"d-{i}") for i in range(20_000)]
    picked = sum(in_overlap(k, 0.1) for k in keys)
    assert 1_800 < picked < 2_200
    assert [in_overlap(k, 0.1) for k in keys[:100]] == [in_overlap(k, 0.1) for k in keys[:100]]
    assert not any(in_overlap(k, 0.0) for k in keys[:100]) and all(in_overlap(k, 1.0) for k in keys[:100])


def test_bucket_labels_come_from_a_bounded_set() -> None:
    assert [bucket_of(b) for b in ("head", "torso", "tail", "", None, 3, "x" * 40, "a|b")] == [
        "head", "torso", "tail", "unknown", "unknown", "unknown", "unknown", "unknown"]


def test_the_settings_read_the_overlap_gold_and_thresholds(tmp_path: Path) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text('\ufeff{"query": "耳机", "doc_id": "d-1", "grade": "高", "title": "Ear"}\n\n'
                    '{"query": "耳机", "doc_id": "d-2", "grade": "无", "bucket": "head"}\n', encoding="utf-8")
    loaded = load_annotate_settings({**BASE, "MONITOR_ANNOTATE_OVERLAP": "0.25", "MONITOR_ANNOTATE_GOLD": str(gold),
                                     "MONITOR_ANNOTATE_AGREEMENT": "alpha=0.7, min_units=10",
                                     "MONITOR_ANNOTATE_AGREEMENT_WINDOW": "7200"})
    assert loaded.overlap_share == 0.25 and loaded.gold_share == 0.05 and loaded.agreement_window == 7200
    assert loaded.thresholds == RaterThresholds(alpha=0.7, min_units=10)
    assert {(g.doc_id, g.level, g.document.title, g.bucket) for g in loaded.gold.values()} == {
        ("d-1", 3, "Ear", None), ("d-2", 0, None, "head")}
    defaults = load_annotate_settings(BASE)
    assert defaults.overlap_share == 0.1 and defaults.gold == {} and defaults.thresholds == RaterThresholds()


@pytest.mark.parametrize(("env", "message"), [
    ({"MONITOR_ANNOTATE_OVERLAP": "1.5"}, "MONITOR_ANNOTATE_OVERLAP: must be a share in"),
    ({"MONITOR_ANNOTATE_GOLD_SHARE": "1"}, r"MONITOR_ANNOTATE_GOLD_SHARE: must be a share in \[0, 1\)"),
    ({"MONITOR_ANNOTATE_AGREEMENT": "alpha=2"}, "alpha: must be in"),
    ({"MONITOR_ANNOTATE_AGREEMENT": "beta=2"}, "'beta=2' is not NAME=VALUE"),
    ({"MONITOR_ANNOTATE_AGREEMENT": "min_units=x"}, "min_units: 'x' is not a number"),
    ({"MONITOR_ANNOTATE_AGREEMENT_WINDOW": "5000"}, "whole number of hours"),
    ({"MONITOR_ANNOTATE_MAX_ANNOTATORS": "0"}, "MONITOR_ANNOTATE_MAX_ANNOTATORS"),
])
def test_bad_rater_settings_are_refused_with_the_reason(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_annotate_settings({**BASE, **env})


@pytest.mark.parametrize(("line", "message"), [
    ("not json", ":1: not JSON"), ("[]", ":1: expected an object"),
    ('{"query": "q", "grade": "高"}', ":1: doc_id: expected a non-empty string"),
    ('{"query": "q", "doc_id": "d", "grade": "high"}', ":1: grade: expected one of 高, 中, 低, 无"),
    ("", "has no gold pair"),
])
def test_a_bad_gold_file_is_refused_with_its_line(tmp_path: Path, line: str, message: str) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=message):
        load_annotate_settings({**BASE, "MONITOR_ANNOTATE_GOLD": str(gold)})


def test_the_gauges_show_alpha_kappa_gold_and_which_are_low_under_hashed_labels() -> None:
    rng = random.Random(3)
    tally = RaterTally(4)
    for _ in range(200):  # "1" and "2" honest, "3" at random
        true = rng.randrange(4)
        a, b = rng.sample(["1", "2", "3"], 2)
        grade = {r: true if r != "3" else rng.randrange(4) for r in (a, b)}
        tally.add_unit("head", grade)
        who = rng.choice(["1", "2", "3"])
        tally.add_gold(who, true, true if who != "3" else rng.randrange(4))
    for _ in range(40):
        tally.add_gold("3", rng.randrange(4), 0)
    registry = CollectorRegistry()
    metrics = BridgeMetrics(registry)
    metrics.show_quality(tally, RaterThresholds(min_units=50, min_pairs=50, min_gold=20), keep=2, salt="k")
    value = registry.get_sample_value
    prefix = "search_relevance_annotate_"
    alpha = tally.overall().alpha("ordinal")
    assert value(f"{prefix}agreement_alpha", {"bucket": "all"}) == pytest.approx(alpha)
    assert value(f"{prefix}agreement_units", {"bucket": "head"}) == 200
    labels = {r: annotator_label(r, "k") for r in ("1", "2", "3")}
    busiest = sorted(labels, key=lambda r: -(tally.peers[r].total + tally.gold[r].total))[:2]
    assert "3" in busiest  # 3 answered 40 more gold tasks
    for rater in busiest:
        assert value(f"{prefix}annotator_kappa", {"annotator": labels[rater]}) == pytest.approx(
            tally.peers[rater].kappa("quadratic"))
    assert value(f"{prefix}agreement_low", {"measure": "kappa", "bucket": "", "annotator": labels["3"]}) == 1
    assert value(f"{prefix}agreement_low", {"measure": "gold_exact", "bucket": "", "annotator": labels["3"]}) == 1
    others = [r for r in labels if r not in busiest]
    assert value(f"{prefix}annotator_pairs", {"annotator": "other"}) == sum(tally.peers[r].total for r in others)
    text = json.dumps([s.labels for m in registry.collect() for s in m.samples])
    assert all(f'"{raw}"' not in text for raw in ("1", "2", "3"))  # never a raw id as a label value
    metrics.show_quality(RaterTally(4), RaterThresholds(), keep=2, salt="k")  # the window emptied
    assert value(f"{prefix}agreement_alpha", {"bucket": "all"}) is None
    assert value(f"{prefix}agreement_low", {"measure": "kappa", "bucket": "", "annotator": labels["3"]}) is None


def test_the_simulated_annotators_choose_the_labelling_configs_grades() -> None:
    from monitor.annotate.tasks import GRADES
    from monitor.sim.label_studio_annotators import LEVEL_NAMES

    assert [NAME_OF[level] for level in range(4)] == list(LEVEL_NAMES) == [name for name, _ in reversed(GRADES)]
