"""The simulator's shadow candidates (issue 28): valid impressions with shadow lists, realistic overlaps,
the union of the top k graded, paired sums as the candidates' drops say, and the served traffic unchanged."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from monitor.core.canary.paired import FIELDS as PAIRED_FIELDS
from monitor.core.decoding import decode_event
from monitor.core.events import Impression
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.shadow import FOOTING_FIELDS, SENT_FIELDS
from monitor.sim import ShadowSpec, SimConfig, SimResult, dcg_of_levels, simulate
from monitor.store.memory import MemoryPipeline
from tests.support.simulated import CONFIG, recompute_paired

SPECS = (ShadowSpec("equal"), ShadowSpec("worse", drop=0.10, bucket="tail"),
         ShadowSpec("broken", kind="irrelevant", drop=1.0, share=0.5))
BASE = SimConfig(seed=5, n_sessions=1500, regression=0.0, bucket_hint_share=1.0)


@pytest.fixture(scope="module")
def run() -> SimResult:
    return simulate(SimConfig(**{**BASE.__dict__, "shadow": SPECS}))


def test_impressions_carry_the_shadow_lists_and_decode_without_dead_letters(run: SimResult) -> None:
    events = [decode_event(e.value, FOUR_LEVEL_SCALE) for e in run.events]  # an invalid one raises
    impressions = [e for e in events if isinstance(e, Impression)]
    assert len(impressions) == BASE.n_sessions and all(isinstance(i, Impression) for i in impressions)
    carried = {name: 0 for name in ("equal", "worse", "broken")}
    for event in impressions:
        assert isinstance(event, Impression)
        truth = run.sessions[event.session_id]
        assert [s.ranker for s in event.shadow] == [s.ranker for s in truth.shadow]
        for shadow, want in zip(event.shadow, truth.shadow, strict=True):
            carried[shadow.ranker] += 1
            assert tuple(r.doc_id for r in shadow.results) == want.doc_ids
            assert [r.score for r in shadow.results] == sorted(want.scores, reverse=True)
    assert carried["equal"] == carried["worse"] == BASE.n_sessions
    assert 0.45 < carried["broken"] / BASE.n_sessions < 0.55  # its share


def test_shadow_lists_share_most_but_not_all_of_the_served_top_k(run: SimResult) -> None:
    by_bucket: dict[str, list[float]] = {}
    for s in run.sessions.values():
        k = BASE.label_k(s.bucket)
        for shadow in s.shadow:
            if shadow.ranker == "equal" or not shadow.degraded:
                shared = len(set(shadow.doc_ids[:k]) & set(s.doc_ids[:k])) / len(s.doc_ids[:k])
                by_bucket.setdefault(s.bucket, []).append(shared)
    for bucket, shares in by_bucket.items():
        assert min(shares) >= 0.5 and 0.7 < sum(shares) / len(shares) < 0.9, bucket
        assert sum(x < 1.0 for x in shares) > len(shares) / 2, bucket  # most lists differ somewhere


def test_a_labelled_session_is_graded_on_the_union_of_its_top_k(run: SimResult) -> None:
    graded = 0
    for sid, grades in run.session_grades.items():
        s = run.sessions[sid]
        k = BASE.label_k(s.bucket)
        union = set(s.doc_ids[:k]).union(*(x.doc_ids[:k] for x in s.shadow))
        assert set(grades) == union  # label_coverage 1: every document of the union
        assert all(grades[d] == run.pools[s.query][d] for d in union)
        graded += 1
    assert graded > 0.8 * BASE.n_sessions * BASE.label_share


def test_an_equal_candidate_is_as_good_and_a_worse_one_lower_by_its_drop(run: SimResult) -> None:
    """Mean DCG@k of the lists as generated (latent grades), paired over the sessions that carry them."""
    sums: dict[tuple[str, str], list[float]] = {}
    for s in run.sessions.values():
        k = BASE.label_k(s.bucket)
        x = dcg_of_levels(np.array(s.levels), k)
        for shadow in s.shadow:
            pair = sums.setdefault((s.bucket, shadow.ranker), [0.0, 0.0])
            pair[0] += x
            pair[1] += dcg_of_levels(np.array(shadow.levels), k)
    ratio = {key: y / x for key, (x, y) in sums.items()}
    for bucket in ("head", "torso", "tail"):
        assert ratio[(bucket, "equal")] == pytest.approx(1.0, abs=0.02)
        assert ratio[(bucket, "broken")] < 0.05
    assert ratio[("torso", "worse")] == pytest.approx(1.0, abs=0.02)
    assert ratio[("tail", "worse")] == pytest.approx(0.90, abs=0.03)


@pytest.mark.slow  # ~5 s: the stream's join over 1,500 sessions
def test_the_streams_paired_sums_are_those_of_the_final_grades(run: SimResult) -> None:
    """Through the join: every candidate paired in every bucket, the sums those of each session's final
    grades (tests/support/simulated.py, no stream code), the equal candidate's x̄ ≈ ȳ, the worse one's
    ȳ about 10% lower in the tail."""
    pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=1, prune_every=10**9, clock=lambda: None)
    for e in run.valid_events:
        pipeline.submit(e.topic, e.key, e.value)
    pipeline.advance(math.inf)
    assert not pipeline.dead_letters
    totals = {g: dict(s) for g, s in pipeline.snapshot().totals().items() if g.endswith("|shadow")}
    want = recompute_paired(run, {sid: [(x.ranker, list(x.doc_ids)) for x in s.shadow]
                                  for sid, s in run.sessions.items()}, CONFIG,
                            {sid: {x.ranker: list(x.scores) for x in s.shadow} for sid, s in run.sessions.items()})
    assert set(totals) == set(want) == {f"{b}|{c}|shadow" for b in ("head", "torso", "tail")
                                        for c in ("equal", "worse", "broken")}
    for group, sums in want.items():
        assert set(sums) == {*PAIRED_FIELDS, *SENT_FIELDS, *FOOTING_FIELDS}, group
        for field in (*PAIRED_FIELDS, *FOOTING_FIELDS):  # the pairs too: the lists' scores (four decimals) tie some documents
            assert totals[group][field] == pytest.approx(sums[field], rel=1e-9, abs=1e-9), (group, field)

    def ratio(group: str) -> float:
        return totals[group]["pair_y"] / totals[group]["pair_x"]

    for bucket in ("head", "torso", "tail"):
        assert ratio(f"{bucket}|equal|shadow") == pytest.approx(1.0, abs=0.03)
        assert ratio(f"{bucket}|broken|shadow") < 0.05
    assert ratio("head|worse|shadow") == pytest.approx(1.0, abs=0.03)
    assert ratio("tail|worse|shadow") == pytest.approx(0.90, abs=0.035)


def test_adding_candidates_leaves_the_served_traffic_and_its_labels_unchanged(run: SimResult) -> None:
    plain = simulate(BASE)
    served = []
    for e in run.events:
        if e.topic == "impressions":
            body = json.loads(e.value)
            assert body.pop("shadow")
            value = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            served.append((e.topic, e.key, value, e.ts))
        else:
            served.append((e.topic, e.key, e.value, e.ts))
    before = [(e.topic, e.key, e.value, e.ts) for e in plain.events]
    it = iter(served)
    assert all(any(x == y for y in it) for x in before)  # the plain run, in order, within the shadow run
    assert sum(e.topic == "annotations" for e in run.events) > sum(e.topic == "annotations" for e in plain.events)
    for sid, s in plain.sessions.items():
        assert run.sessions[sid].doc_ids == s.doc_ids and run.sessions[sid].scores == s.scores


@pytest.mark.parametrize(("specs", "message"), [
    ((ShadowSpec("ranker-b"),), "'ranker-b' is a served ranker"),
    ((ShadowSpec("c"), ShadowSpec("c")), "'c' is named twice"),
    (tuple(ShadowSpec(f"c{i}") for i in range(5)), "5 shadow candidates, more than the event limit of 4"),
    ((ShadowSpec("c", drop=1.0),), "c: drop must be in [0, 1)"),
    ((ShadowSpec("c", agreement=1.0),), "c: agreement must be in [0, 1)"),
    ((ShadowSpec("c", bucket="middle"),), "c: bucket 'middle' is not one of"),
    ((ShadowSpec("c", kind="empty"),), "c: kind 'empty' is not one of flip, irrelevant"),
    ((ShadowSpec("c", share=2.0),), "c: share must be in [0, 1]"),
])
def test_bad_candidates_are_refused(specs: tuple[ShadowSpec, ...], message: str) -> None:
    with pytest.raises(ValueError, match="shadow: " + message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        SimConfig(shadow=specs)
