"""The shadow (paired) comparison as a canary comparison: from a history's ``bucket|R|shadow`` groups to
comparisons of kind "shadow" (equal → pass, never a regression; 10% worse → regression; a shadow at 0 →
regression at once), the checks not applicable, ended by a canary_end, the canary's comparisons
unchanged beside it; its gauges, ``monitor canary`` rows, alerts, the demo's lines and the rollup."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.core.canary import CanaryConfig, Comparison, Verdict, comparisons, first_epoch, overall
from monitor.core.canary.alerts import AlertBook, AlertConfig, check_note
from monitor.core.canary.paired import paired_stats
from monitor.core.canary.shadow import NOT_APPLICABLE
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.history import History
from monitor.core.stream.stats import Stats
from monitor.demo.summary import render_summary
from monitor.demo.verdict_rows import VerdictRow
from monitor.demo.view import verdict_lines
from monitor.export.verdict_gauges import CanaryCollector
from monitor.store.memory import MemoryPipeline
from monitor.worker.canary_cli import rows, table
from monitor.worker.rollup import Rollup, RollupBody, decode, encode
from monitor.worker.verdicts import Verdicts

WIDTH = 900.0
Shadow = Callable[[np.random.Generator, float], float]


def shadow_epochs(shadow: Shadow, epochs: int = 8, per: int = 300, seed: int = 7) -> dict[int, Stats]:
    """Per epoch, the paired sums of ``per`` sessions: served DCG x ~ Gamma(2, 1), shadow DCG
    ``shadow(rng, x)``; pair counts varying per session, the shadow's scaled like its DCG."""
    rng = np.random.default_rng(seed)
    out: dict[int, Stats] = {}
    for e in range(epochs):
        stats = Stats()
        for _ in range(per):
            x = float(rng.gamma(2.0, 1.0))
            y = shadow(rng, x)
            c, d = float(rng.integers(2, 9)), float(rng.integers(0, 3))
            ratio = y / x if x > 0 else 1.0
            stats.add(paired_stats(x, y, (c, d), (c * min(ratio, 1.0), d)))
        out[e] = stats
    return out


def equal(rng: np.random.Generator, x: float) -> float:
    return max(0.0, x + float(rng.normal(0.0, 0.1)))


def worse(rng: np.random.Generator, x: float) -> float:
    return max(0.0, 0.9 * x + float(rng.normal(0.0, 0.1)))


def history_of(shadow: dict[int, Stats], bucket: str = "tail", ranker: str = "cand",
               extra: dict[int, dict[str, Stats]] | None = None) -> History:
    epochs: dict[int, dict[str, Stats]] = {e: {f"{bucket}|{ranker}|shadow": s} for e, s in shadow.items()}
    for e, groups in (extra or {}).items():
        epochs.setdefault(e, {}).update(groups)
    return History(WIDTH, epochs)


def shadows(history: History, deploys: list[Deploy] | None = None) -> dict[str, Comparison]:
    return {c.metric: c for c in comparisons(history, deploys or [], CanaryConfig()) if c.kind == "shadow"}


EQUAL = shadow_epochs(equal)
WORSE = shadow_epochs(worse)


def test_an_equal_shadow_candidate_passes_eventually_and_is_never_a_regression() -> None:
    seen = []
    for end in range(1, len(EQUAL) + 1):
        found = shadows(history_of({e: s for e, s in EQUAL.items() if e < end}))
        assert set(found) == {"dcg", "pnr"}
        seen.append(found["dcg"].verdict.verdict)
    assert "regression" not in seen and seen[-1] == "pass"
    c = shadows(history_of(EQUAL))["dcg"]
    assert (c.bucket, c.kind, c.baseline, c.candidate) == ("tail", "shadow", "served", "cand")
    assert c.verdict.n_baseline == c.verdict.n_candidate == 8 * 300
    assert abs(c.verdict.estimate or 1.0) < 0.02


def test_a_shadow_candidate_10_percent_worse_is_a_regression() -> None:
    found = shadows(history_of(WORSE))
    v = found["dcg"].verdict
    assert v.verdict == "regression" and v.estimate == pytest.approx(-0.1, abs=0.02)
    assert v.upper is not None and v.upper < 0
    assert [o.verdict for o in overall(list(found.values()))] == ["regression"]


def test_a_shadow_with_all_zero_dcg_is_a_regression_at_the_first_look() -> None:
    broken = shadow_epochs(lambda rng, x: 0.0, epochs=1, per=CanaryConfig().min_sessions)
    v = shadows(history_of(broken))["dcg"].verdict
    assert v.verdict == "regression" and v.estimate == -1.0


def test_the_checks_are_carried_as_not_applicable_never_as_flagged() -> None:
    v = shadows(history_of(WORSE))["dcg"].verdict
    assert v.checks == NOT_APPLICABLE and v.trusted is True
    assert [(c.name, c.flagged, c.applicable) for c in v.checks] == [("sample_ratio", False, False),
                                                                       ("covariate_balance", False, False)]
    assert [check_note(c) for c in v.checks] == ["ratio n/a", "balance n/a"]


def test_a_canary_end_of_the_shadow_ranker_ends_it_and_a_later_shadow_starts_afresh() -> None:
    history = history_of(EQUAL)
    assert shadows(history, [Deploy("canary_end", "cand", 8 * WIDTH)]) == {}
    restarted = shadows(history, [Deploy("canary_end", "cand", 5 * WIDTH + 1.0)])["dcg"].verdict
    assert restarted.n_candidate == 2 * 300  # epochs 6 and 7 only
    assert shadows(history, [Deploy("canary_end", "other", 8 * WIDTH)]) != {}


def test_the_canary_comparisons_beside_a_shadow_are_unchanged() -> None:
    rng = np.random.default_rng(3)
    arms: dict[int, dict[str, Stats]] = {}
    for e in range(4):
        for group in ("tail|base|control", "tail|cand|canary"):
            dcg = rng.gamma(2.0, 1.0, 300)
            arms.setdefault(e, {})[group] = Stats({"sessions": 300.0, "dcg": float(dcg.sum()),
                                                   "dcg_sq": float((dcg ** 2).sum()), "impressions": 600.0})
    plain = History(WIDTH, arms, {("canary", "cand"): (0.0, 4 * WIDTH), ("plain", "base"): (0.0, 4 * WIDTH)})
    both = History(WIDTH, history_of(EQUAL, extra=arms).epochs, plain.seen)
    without = comparisons(plain, [], CanaryConfig())
    with_shadow = comparisons(both, [], CanaryConfig())
    assert [c for c in with_shadow if c.kind != "shadow"] == without and {c.kind for c in without} == {"canary"}
    assert [c.kind for c in with_shadow] == ["canary", "canary", "shadow", "shadow"]  # sorted by kind


def test_the_shadow_arm_of_seen_asks_a_reader_for_epochs() -> None:
    seen = {("shadow", "cand"): (3 * WIDTH, 9 * WIDTH)}
    config = CanaryConfig(adjust_queries=False)
    assert first_epoch(History(WIDTH, {}, seen), [], config) == 3
    assert first_epoch(History(WIDTH, {}), [], config) is None


SHADOW_LABELS = {"bucket": "tail", "metric": "dcg", "kind": "shadow", "baseline": "served", "candidate": "cand"}


def registry_of(found: list[Comparison], max_rankers: int = 10) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(CanaryCollector(lambda: (found, []), max_rankers=max_rankers))
    return registry


def test_the_gauges_of_a_shadow_comparison() -> None:
    found = list(shadows(history_of(WORSE)).values())
    v = found[0].verdict
    registry = registry_of(found)
    get = registry.get_sample_value
    assert get("search_relevance_canary_verdict", SHADOW_LABELS) == -1.0
    assert get("search_relevance_canary_estimate", SHADOW_LABELS) == pytest.approx(v.estimate)
    assert get("search_relevance_canary_lower", SHADOW_LABELS) == pytest.approx(v.lower)
    assert get("search_relevance_canary_upper", SHADOW_LABELS) == pytest.approx(v.upper)
    assert get("search_relevance_canary_sessions", {**SHADOW_LABELS, "arm": "baseline"}) == 2400
    pair = {k: SHADOW_LABELS[k] for k in ("bucket", "kind", "baseline", "candidate")}
    assert get("search_relevance_canary_overall_verdict", pair) == -1.0
    text = generate_latest(registry).decode()
    assert "search_relevance_canary_sample_ratio_mismatch{" not in text  # not applicable: left out
    assert "search_relevance_canary_covariate_imbalance{" not in text
    described = [(m.name, m.type) for m in registry_of([]).collect()]
    assert [(m.name, m.type) for m in CanaryCollector(lambda: (found, [])).describe()] == described


def test_shadow_candidate_names_are_capped_and_served_takes_no_place() -> None:
    def one(candidate: str, n: int) -> Comparison:
        return Comparison("tail", "dcg", "shadow", "served", candidate,
                          Verdict("pass", 0.0, -0.01, 0.01, 0.0, n, n, "r"))

    registry = registry_of([one("big", 900), one("mid", 500), one("small", 10)], max_rankers=2)
    text = generate_latest(registry).decode()
    assert 'candidate="big"' in text and 'candidate="mid"' in text and 'candidate="small"' not in text
    assert registry.get_sample_value("search_relevance_canary_verdict",
                                     {**SHADOW_LABELS, "candidate": "other"}) == 1.0
    assert 'baseline="served"' in text and 'baseline="other"' not in text


def test_monitor_canary_json_and_table_include_the_shadow_comparison() -> None:
    found = list(shadows(history_of(WORSE)).values())
    out = json.loads(json.dumps(rows(found)))
    assert [(r["kind"], r["baseline"], r["candidate"], r["metric"]) for r in out] == [
        ("shadow", "served", "cand", "dcg"), ("shadow", "served", "cand", "pnr")]
    assert out[0]["verdict"] == "regression" and out[0]["overall"]["verdict"] == "regression"
    assert [(c["name"], c["note"], c["applicable"], c["flagged"]) for c in out[0]["checks"]] == [
        ("sample_ratio", "ratio n/a", False, False), ("covariate_balance", "balance n/a", False, False)]
    text = table(found)
    first = text.splitlines()[1]
    assert first.split()[:6] == ["tail", "dcg", "shadow", "cand", "served", "regression"]
    assert first.endswith("ratio n/a, balance n/a") and "flagged checks" not in text


def test_a_shadow_regression_fires_the_canary_alert_with_its_kind_and_resolves_on_a_pass() -> None:
    found = shadows(history_of(WORSE))["dcg"]
    book = AlertBook(AlertConfig())
    fired = book.update(100.0, [found])
    assert len(fired) == 1 and fired[0].status == "firing"
    assert dict(fired[0].labels) == {"alertname": "SearchRelevanceCanaryRegression", "severity": "warning",
                                     "bucket": "tail", "metric": "dcg", "ranker": "cand",
                                     "baseline": "served", "kind": "shadow"}
    notes = fired[0].annotations
    assert notes["summary"].startswith("tail DCG: shadow cand is ") and "below the served lists" in notes["summary"]
    assert "No user is served by cand" in notes["description"]
    assert "var-kind=shadow" in notes["dashboard_url"]
    assert notes["runbook_url"].endswith("/SearchRelevanceCanaryRegression.md")
    passed = shadows(history_of(EQUAL))["dcg"]
    assert passed.verdict.verdict == "pass"
    resolved = book.update(200.0, [passed])
    assert [(n.status, n.key) for n in resolved] == [("resolved", fired[0].key)] and book.firing() == []


def test_the_demo_shows_a_shadow_candidate_beside_the_canary() -> None:
    shadow_rows = [VerdictRow.of(c) for c in shadows(history_of(WORSE)).values()]
    canary = VerdictRow("tail", "dcg", "canary", "base", "cand", "pass", 0.0, -0.01, 0.01, 900, 900, "ok")
    lines = verdict_lines([canary, *shadow_rows])
    assert any("shadow cand" in line and "overall REGRESSION" in line for line in lines)
    assert any("canary cand" in line and "overall PASS" in line for line in lines)
    text = render_summary({
        "command": "monitor demo", "interrupted": False, "events": 1, "wall_seconds": 1.0,
        "event_time": {"hours": 1.0, "start": "a", "end": "b"}, "dead_letters": {}, "groups": [],
        "sessions": {k: 0 for k in ("impressions", "sampled", "scored", "expired", "rescored", "corrections")},
        "verdicts": [r.to_json() for r in shadow_rows], "overall": [], "alerts": []})
    assert "tail   dcg  ~cand" in text and "~: a shadow candidate" in text


def test_a_shadow_comparison_survives_the_rollup_with_its_checks_not_applicable() -> None:
    found = list(shadows(history_of(WORSE)).values())
    snapshot = MemoryPipeline(StreamConfig(), FOUR_LEVEL_SCALE, partitions=1).snapshot()
    rollup = Rollup(RollupBody(snapshot, Verdicts(found, []), 0, 0), 1.0, 0.0, 2.0, "x")
    back = decode(encode(rollup), StreamConfig()).shared.verdicts.comparisons
    assert back == found and all(not c.applicable for c in back[0].verdict.checks)
