"""CanaryCollector: the exported series, left-out missing values, capped rankers, deploy times, and per pair
the overall verdict and the checks (sample ratio, covariate balance)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.core.canary import Check, Comparison, Verdict
from monitor.core.events import Deploy
from monitor.export.verdict_gauges import CanaryCollector


def comparison(candidate: str = "b", verdict: str = "regression", n: int = 1234, bucket: str = "tail",
               estimate: float | None = -0.103, kind: str = "canary") -> Comparison:
    v = Verdict(verdict, estimate, None if estimate is None else -0.141,  # type: ignore[arg-type]
                None if estimate is None else -0.065, None if estimate is None else 12.5, 5678, n, "r")
    return Comparison(bucket, "dcg", kind, "a", candidate, v)


def registry_of(found: Sequence[Comparison], deploys: Sequence[Deploy] = (), max_rankers: int = 10
                ) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(CanaryCollector(lambda: (found, deploys), max_rankers=max_rankers))
    return registry


LABELS = {"bucket": "tail", "metric": "dcg", "kind": "canary", "baseline": "a", "candidate": "b"}


def test_every_series_of_a_comparison() -> None:
    registry = registry_of([comparison()])
    get = registry.get_sample_value
    assert get("search_relevance_canary_estimate", LABELS) == pytest.approx(-0.103)
    assert get("search_relevance_canary_lower", LABELS) == pytest.approx(-0.141)
    assert get("search_relevance_canary_upper", LABELS) == pytest.approx(-0.065)
    assert get("search_relevance_canary_evidence", LABELS) == pytest.approx(12.5)
    assert get("search_relevance_canary_verdict", LABELS) == -1.0
    assert get("search_relevance_canary_sessions", {**LABELS, "arm": "baseline"}) == 5678
    assert get("search_relevance_canary_sessions", {**LABELS, "arm": "candidate"}) == 1234
    assert get("search_relevance_canary_verdict_changes", LABELS) == 0
    assert get("search_relevance_canary_verdict_changed_timestamp_seconds", LABELS) is None  # never changed


def test_how_often_and_when_the_verdict_changed() -> None:
    c = comparison()
    changed = Comparison(c.bucket, c.metric, c.kind, c.baseline, c.candidate,
                         replace(c.verdict, changes=2, changed_at=1_763_712_900.0))
    get = registry_of([changed]).get_sample_value
    assert get("search_relevance_canary_verdict_changes", LABELS) == 2
    assert get("search_relevance_canary_verdict_changed_timestamp_seconds", LABELS) == 1_763_712_900.0


def test_the_share_adjusted_for_query_difficulty_is_shown_only_for_an_adjusted_comparison() -> None:
    c = comparison()
    assert registry_of([c]).get_sample_value("search_relevance_canary_adjusted_share", LABELS) is None
    adjusted = Comparison(c.bucket, c.metric, c.kind, c.baseline, c.candidate, replace(c.verdict, adjusted=0.83))
    get = registry_of([adjusted]).get_sample_value
    assert get("search_relevance_canary_adjusted_share", LABELS) == pytest.approx(0.83)


@pytest.mark.parametrize(("verdict", "code"), [("pass", 1.0), ("inconclusive", 0.0), ("regression", -1.0)])
def test_verdict_codes(verdict: str, code: float) -> None:
    assert registry_of([comparison(verdict=verdict)]).get_sample_value(
        "search_relevance_canary_verdict", LABELS) == code


def test_undefined_values_are_left_out_not_zero() -> None:
    registry = registry_of([comparison(verdict="inconclusive", estimate=None, n=0)])
    text = generate_latest(registry).decode()
    for name in ("estimate", "lower", "upper", "evidence"):
        assert f"search_relevance_canary_{name}{{" not in text
    assert registry.get_sample_value("search_relevance_canary_verdict", LABELS) == 0.0
    assert registry.get_sample_value("search_relevance_canary_sessions", {**LABELS, "arm": "candidate"}) == 0


def test_nothing_to_compare_exports_no_samples() -> None:
    text = generate_latest(registry_of([])).decode()
    assert "search_relevance_canary_verdict" in text  # the family is described
    assert "search_relevance_canary_verdict{" not in text and "search_relevance_deploy_timestamp_seconds{" not in text


def test_rankers_beyond_the_cap_become_other_and_the_worst_verdict_is_shown() -> None:
    found = [comparison("b", "pass", n=900), comparison("c", "pass", n=50), comparison("d", "regression", n=40),
             comparison("e", "inconclusive", n=30)]
    registry = registry_of(found, max_rankers=2)  # a (baseline) and b are the busiest
    get = registry.get_sample_value
    assert get("search_relevance_canary_verdict", LABELS) == 1.0
    other = {**LABELS, "candidate": "other"}
    assert get("search_relevance_canary_verdict", other) == -1.0
    assert get("search_relevance_canary_sessions", {**other, "arm": "candidate"}) == 40
    text = generate_latest(registry).decode()
    assert 'candidate="c"' not in text and 'candidate="d"' not in text
    assert text.count('search_relevance_canary_verdict{') == 2  # one series per label set


def test_deploy_timestamps_are_the_latest_per_ranker_and_kind() -> None:
    deploys = [Deploy("canary_start", "b", 100.0, "a"), Deploy("canary_start", "b", 50.0, "a"),
               Deploy("rollback", "b", 300.0), Deploy("deploy", "a", 10.0)]
    registry = registry_of([], deploys)
    get = registry.get_sample_value
    assert get("search_relevance_deploy_timestamp_seconds", {"ranker": "b", "kind": "canary_start"}) == 100.0
    assert get("search_relevance_deploy_timestamp_seconds", {"ranker": "b", "kind": "rollback"}) == 300.0
    assert get("search_relevance_deploy_timestamp_seconds", {"ranker": "a", "kind": "deploy"}) == 10.0
    assert get("search_relevance_deploy_timestamp_seconds", {"ranker": "a", "kind": "rollback"}) is None


def test_max_rankers_is_validated() -> None:
    with pytest.raises(ValueError) as error:
        CanaryCollector(lambda: ([], []), max_rankers=0)
    assert str(error.value) == "max_rankers: expected a positive integer, got 0"


# --- per pair: the overall verdict and the checks -----------------------------------------------------

PAIR = {"bucket": "tail", "kind": "canary", "baseline": "a", "candidate": "b"}
SRM = Check("sample_ratio", True, -0.096, None, None, 7.2, 0.5, "the canary has 45.20% …")
SRM_FINE = Check("sample_ratio", False, 0.004, None, None, -1.3, 0.5, "the canary has 50.20% …")
IMBALANCE = Check("covariate_balance", True, -0.048, -0.07, -0.026, 5.1, None, "…")
BALANCED = Check("covariate_balance", False, 0.01, -0.02, 0.04, 0.2, None, "…")


def pair(dcg: str, pnr: str, candidate: str = "b", n: int = 1234, dcg_checks: tuple[Check, ...] = (),
         pnr_checks: tuple[Check, ...] = (), trusted: bool = True) -> list[Comparison]:
    out = []
    for metric, name, checks in (("dcg", dcg, dcg_checks), ("pnr", pnr, pnr_checks)):
        c = comparison(candidate, name, n)
        out.append(Comparison(c.bucket, metric, c.kind, c.baseline, c.candidate,
                              replace(c.verdict, checks=checks, trusted=trusted)))
    return out


@pytest.mark.parametrize(("dcg", "pnr", "code"), [
    ("pass", "pass", 1.0), ("pass", "inconclusive", 0.0), ("pass", "regression", -1.0),
    ("regression", "inconclusive", -1.0), ("inconclusive", "inconclusive", 0.0),
])
def test_the_overall_verdict_of_a_pair(dcg: str, pnr: str, code: float) -> None:
    registry = registry_of(pair(dcg, pnr))
    assert registry.get_sample_value("search_relevance_canary_overall_verdict", PAIR) == code
    text = generate_latest(registry).decode()
    assert text.count("search_relevance_canary_overall_verdict{") == 1  # one per pair, no metric label


def test_the_overall_verdict_shows_the_worst_pair_where_capped_names_collide() -> None:
    found = [*pair("pass", "pass", "b", n=900), *pair("pass", "pass", "c", n=50),
             *pair("pass", "regression", "d", n=40), *pair("inconclusive", "pass", "e", n=30)]
    get = registry_of(found, max_rankers=2).get_sample_value
    assert get("search_relevance_canary_overall_verdict", PAIR) == 1.0
    assert get("search_relevance_canary_overall_verdict", {**PAIR, "candidate": "other"}) == -1.0


def test_a_sample_ratio_mismatch_is_one_series_per_pair_with_its_size() -> None:
    registry = registry_of(pair("inconclusive", "regression", dcg_checks=(BALANCED, SRM), pnr_checks=(SRM,),
                                trusted=False))
    get = registry.get_sample_value
    assert get("search_relevance_canary_sample_ratio_mismatch", PAIR) == 1.0
    assert get("search_relevance_canary_sample_ratio", PAIR) == pytest.approx(-0.096)
    assert get("search_relevance_canary_covariate_imbalance", PAIR) == 0.0  # checked and fine
    text = generate_latest(registry).decode()
    assert text.count("search_relevance_canary_sample_ratio_mismatch{") == 1


def test_checks_that_ran_and_found_nothing_are_zero() -> None:
    get = registry_of(pair("pass", "pass", dcg_checks=(BALANCED, SRM_FINE), pnr_checks=(SRM_FINE,))
                      ).get_sample_value
    assert get("search_relevance_canary_sample_ratio_mismatch", PAIR) == 0.0
    assert get("search_relevance_canary_sample_ratio", PAIR) == pytest.approx(0.004)
    assert get("search_relevance_canary_covariate_imbalance", PAIR) == 0.0


def test_an_imbalance_is_flagged_and_checks_that_did_not_run_are_left_out() -> None:
    registry = registry_of(pair("inconclusive", "pass", dcg_checks=(IMBALANCE,)))
    assert registry.get_sample_value("search_relevance_canary_covariate_imbalance", PAIR) == 1.0
    text = generate_latest(registry).decode()
    assert "search_relevance_canary_sample_ratio_mismatch{" not in text  # no share declared: not checked
    assert "search_relevance_canary_sample_ratio{" not in text
    nothing = generate_latest(registry_of(pair("pass", "pass"))).decode()
    assert "search_relevance_canary_covariate_imbalance{" not in nothing
    assert "search_relevance_canary_overall_verdict{" in nothing


def test_a_flagged_check_wins_where_capped_names_collide() -> None:
    found = [*pair("pass", "pass", "b", n=900), *pair("pass", "pass", "c", n=50, dcg_checks=(SRM_FINE,)),
             *pair("pass", "pass", "d", n=40, dcg_checks=(IMBALANCE, SRM), pnr_checks=(SRM,)),
             *pair("pass", "pass", "e", n=30, dcg_checks=(BALANCED,))]
    get = registry_of(found, max_rankers=2).get_sample_value
    other = {**PAIR, "candidate": "other"}
    assert get("search_relevance_canary_sample_ratio_mismatch", other) == 1.0
    assert get("search_relevance_canary_sample_ratio", other) == pytest.approx(-0.096)  # the flagged pair's
    assert get("search_relevance_canary_covariate_imbalance", other) == 1.0
    assert get("search_relevance_canary_sample_ratio_mismatch", PAIR) is None  # b: not checked
