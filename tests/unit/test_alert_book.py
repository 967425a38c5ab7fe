"""Alerts from comparisons: labels, annotations, and the AlertBook's firing, updates and resolutions; the
checks' alerts (sample-ratio mismatch, covariate imbalance), one per pair while flagged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from monitor.core.canary import Check, Comparison, Verdict
from monitor.core.canary.alerts import (
    ALERTNAMES,
    CHECK_ALERTNAMES,
    AlertBook,
    AlertConfig,
    Notification,
    annotations_of,
    check_note,
    desired_alerts,
)

CONFIG = AlertConfig(runbook_base="https://runbooks.test/srm/", resolve_after=600.0)


def verdict(name: str, estimate: float = -0.103, lower: float = -0.141, upper: float = -0.065) -> Verdict:
    return Verdict(name, estimate, lower, upper, 12.34, 5678, 1234, "reason")  # type: ignore[arg-type]


def comparison(name: str = "regression", bucket: str = "tail", kind: str = "canary", metric: str = "dcg",
               **numbers: float) -> Comparison:
    return Comparison(bucket, metric, kind, "ranker-a", "ranker-b", verdict(name, **numbers))


def test_a_canary_regression_alert_has_the_labels_and_the_effect_in_its_summary() -> None:
    [alert] = desired_alerts([comparison(), comparison("pass", bucket="head")], CONFIG)
    assert alert.labels == {"alertname": "SearchRelevanceCanaryRegression", "severity": "critical",
                            "bucket": "tail", "metric": "dcg", "ranker": "ranker-b", "baseline": "ranker-a"}
    assert alert.annotations["summary"] == "tail DCG: ranker-b is 10.3% below ranker-a (95% CS −14.1% … −6.5%)"
    assert alert.annotations["runbook_url"] == "https://runbooks.test/srm/SearchRelevanceCanaryRegression.md"
    assert alert.annotations["dashboard_url"] == \
        "http://127.0.0.1:3000/d/srm-canary?var-bucket=tail&var-ranker=ranker-b&var-baseline=ranker-a&var-kind=canary"
    description = alert.annotations["description"]
    assert "1234 canary and 5678 control sessions" in description
    assert "−14.1% … −6.5%" in description and "log Λ = 12.3" in description


def test_a_deploy_regression_has_its_own_name_severity_and_runbook() -> None:
    [alert] = desired_alerts([comparison(kind="deploy", metric="pnr")], CONFIG)
    assert alert.labels["alertname"] == "SearchRelevanceDeployRegression"
    assert alert.labels["severity"] == "warning"
    assert alert.annotations["summary"].startswith("tail PNR: ranker-b is 10.3% below ranker-a")
    assert alert.annotations["runbook_url"].endswith("/SearchRelevanceDeployRegression.md")
    assert "weaker evidence than a canary" in alert.annotations["description"]


def test_no_dashboard_template_means_no_dashboard_link() -> None:
    config = AlertConfig(dashboard_url="", alpha=0.1)
    annotations = annotations_of(comparison(), config)
    assert "dashboard_url" not in annotations
    assert "(90% CS −14.1% … −6.5%)" in annotations["summary"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"runbook_base": " "}, "runbook_base: expected a non-empty string, got ' '"),
    ({"resolve_after": -1.0}, "resolve_after: expected a finite number of seconds ≥ 0, got -1.0"),
    ({"alpha": 0.0}, "alpha: must be in (0, 1), got 0.0"),
    ({"dashboard_url": "http://g/{host}"}, "dashboard_url: not a valid template (KeyError('host'))"),
])
def test_alert_config_errors_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        AlertConfig(**kwargs)  # type: ignore[arg-type]
    assert str(error.value).startswith(message)


def test_a_new_regression_fires_once_and_stays_quiet_while_unchanged() -> None:
    book = AlertBook(CONFIG)
    [note] = book.update(100.0, [comparison()])
    assert (note.status, note.starts_at, note.ends_at) == ("firing", 100.0, None)
    assert book.update(160.0, [comparison()]) == []
    assert book.firing() == [note]


def test_a_changed_effect_updates_the_firing_alert_keeping_its_start() -> None:
    book = AlertBook(CONFIG)
    book.update(100.0, [comparison()])
    [update] = book.update(160.0, [comparison(estimate=-0.12, lower=-0.15, upper=-0.09)])
    assert (update.status, update.starts_at) == ("firing", 100.0)
    assert "12.0% below" in update.annotations["summary"]
    assert book.firing() == [update]


def test_new_session_counts_alone_refresh_the_text_without_a_notification() -> None:
    book = AlertBook(CONFIG)
    book.update(100.0, [comparison()])
    more = Comparison("tail", "dcg", "canary", "ranker-a", "ranker-b",
                      Verdict("regression", -0.103, -0.141, -0.065, 13.0, 6000, 1300, "reason"))
    assert book.update(160.0, [more]) == []
    [firing] = book.firing()
    assert "1300 canary and 6000 control sessions" in firing.annotations["description"]
    assert firing.starts_at == 100.0


@pytest.mark.parametrize("after", ["pass", "gone"])
def test_pass_or_a_vanished_comparison_resolves_at_once(after: str) -> None:
    book = AlertBook(CONFIG)
    [fired] = book.update(100.0, [comparison(), comparison(bucket="head")])[:1]
    later = [comparison("pass")] if after == "pass" else []
    resolved = book.update(200.0, [*later, comparison(bucket="head")])
    assert resolved == [Notification(fired.labels, fired.annotations, 100.0, 200.0)]
    assert resolved[0].status == "resolved"
    assert [n.labels["bucket"] for n in book.firing()] == ["head"]
    assert book.update(300.0, [comparison(bucket="head")]) == []  # resolved once only


def test_an_inconclusive_verdict_resolves_only_after_the_hold() -> None:
    book = AlertBook(CONFIG)
    book.update(0.0, [comparison()])
    assert book.update(100.0, [comparison("inconclusive")]) == []
    assert book.update(500.0, [comparison()]) == []            # back to regression: the hold restarts
    assert book.update(1000.0, [comparison("inconclusive")]) == []
    [resolved] = book.update(1100.0, [comparison("inconclusive")])
    assert (resolved.status, resolved.ends_at) == ("resolved", 1100.0)
    assert book.firing() == []


def test_a_regression_after_resolution_fires_again_with_a_new_start() -> None:
    book = AlertBook(CONFIG)
    book.update(0.0, [comparison()])
    book.update(10.0, [])
    [again] = book.update(20.0, [comparison()])
    assert (again.status, again.starts_at) == ("firing", 20.0)


def test_canary_and_deploy_alerts_of_the_same_pair_are_separate() -> None:
    book = AlertBook(CONFIG)
    notes = book.update(0.0, [comparison(), comparison(kind="deploy")])
    assert sorted(n.labels["alertname"] for n in notes) == ["SearchRelevanceCanaryRegression",
                                                            "SearchRelevanceDeployRegression"]
    assert len({n.key for n in notes}) == 2


# --- the checks' alerts: one per pair while flagged ----------------------------------------------------

SRM = Check("sample_ratio", True, -0.096, None, None, 7.2, 0.5,
            "the canary has 45.20% of 20,000 impressions against 50.0% declared (−9.6%); log BF 7.2")
IMBALANCE = Check("covariate_balance", True, -0.048, -0.07, -0.026, 5.1, None,
                  "the candidate's sessions' queries have a mean covariate −4.8% [−7.0%, −2.6%]")


def checked(name: str = "inconclusive", *checks: Check, kind: str = "canary", metric: str = "dcg",
            bucket: str = "tail") -> Comparison:
    c = comparison(name, bucket=bucket, kind=kind, metric=metric)
    return Comparison(c.bucket, c.metric, c.kind, c.baseline, c.candidate,
                      replace(c.verdict, checks=checks, trusted=SRM not in checks))


def pair(*dcg_checks: Check, srm: bool = True, name: str = "inconclusive") -> list[Comparison]:
    """A pair's two comparisons, the sample-ratio check on both (as pairing puts it)."""
    return [checked(name, *dcg_checks, *((SRM,) if srm else ())),
            checked(name, *((SRM,) if srm else ()), metric="pnr")]


def test_a_sample_ratio_mismatch_is_one_alert_per_pair_saying_the_verdicts_cannot_be_trusted() -> None:
    [alert] = desired_alerts(pair(), CONFIG)
    assert alert.labels == {"alertname": "SearchRelevanceSampleRatioMismatch", "severity": "warning",
                            "bucket": "tail", "kind": "canary", "ranker": "ranker-b", "baseline": "ranker-a"}
    assert alert.annotations["summary"] == \
        "tail: canary ranker-b has 45.2% of the impressions against 50.0% declared (−9.6%; control ranker-a)"
    description = alert.annotations["description"]
    assert "log BF 7.2" in description and "cannot be trusted" in description and "pass is withheld" in description
    assert "canary_share" in description and "bots" in description
    assert alert.annotations["runbook_url"] == "https://runbooks.test/srm/SearchRelevanceSampleRatioMismatch.md"
    assert alert.annotations["dashboard_url"] == \
        "http://127.0.0.1:3000/d/srm-canary?var-bucket=tail&var-ranker=ranker-b&var-baseline=ranker-a&var-kind=canary"


def test_a_covariate_imbalance_says_the_dcg_verdict_is_not_adjusted() -> None:
    [alert] = desired_alerts([checked("pass", IMBALANCE, kind="deploy"), checked("pass", kind="deploy",
                                                                                  metric="pnr")], CONFIG)
    assert alert.labels == {"alertname": "SearchRelevanceCovariateImbalance", "severity": "warning",
                            "bucket": "tail", "kind": "deploy", "ranker": "ranker-b", "baseline": "ranker-a"}
    assert alert.annotations["summary"] == ("tail: ranker-b's sessions have harder queries than ranker-a's "
                                            "(their mean DCG@k before the period −4.8%, CS −7.0% … −2.6%)")
    description = alert.annotations["description"]
    assert "without the adjustment for query difficulty" in description and "reformulating" in description
    assert "not randomised" in description  # a deploy: the mix may have moved on its own
    assert alert.annotations["runbook_url"].endswith("/SearchRelevanceCovariateImbalance.md")
    assert alert.annotations["dashboard_url"].endswith("var-kind=deploy")


def test_checks_not_flagged_raise_nothing() -> None:
    fine = [replace(SRM, flagged=False), replace(IMBALANCE, flagged=False)]
    assert desired_alerts([checked("pass", *fine), checked("pass", fine[0], metric="pnr")], CONFIG) == []


def test_a_check_alert_fires_once_keeps_firing_and_resolves_when_the_comparison_disappears() -> None:
    book = AlertBook(CONFIG)
    notes = book.update(100.0, pair(IMBALANCE))
    assert sorted(n.labels["alertname"] for n in notes) == ["SearchRelevanceCovariateImbalance",
                                                            "SearchRelevanceSampleRatioMismatch"]
    assert all((n.status, n.starts_at) == ("firing", 100.0) for n in notes)
    assert book.update(160.0, pair(IMBALANCE)) == []  # still flagged: nothing new to say
    assert book.update(5000.0, pair(IMBALANCE)) == []  # no hold to run out: it fires while flagged
    assert sorted(n.key for n in book.firing()) == sorted(n.key for n in notes)
    resolved = book.update(5060.0, [])
    assert sorted((n.status, n.starts_at, n.ends_at) for n in resolved) == [("resolved", 100.0, 5060.0)] * 2
    assert book.firing() == [] and book.update(5120.0, []) == []


def test_a_check_no_longer_flagged_resolves_at_once() -> None:
    book = AlertBook(CONFIG)
    book.update(0.0, pair(IMBALANCE))
    [resolved] = book.update(60.0, pair(replace(IMBALANCE, flagged=False)))
    assert resolved.labels["alertname"] == "SearchRelevanceCovariateImbalance" and resolved.ends_at == 60.0
    assert [n.labels["alertname"] for n in book.firing()] == ["SearchRelevanceSampleRatioMismatch"]


def test_a_changed_mismatch_updates_its_alert_keeping_its_start() -> None:
    book = AlertBook(CONFIG)
    book.update(0.0, pair())
    bigger = replace(SRM, estimate=-0.12)
    [update] = book.update(60.0, [checked("inconclusive", bigger), checked("inconclusive", bigger, metric="pnr")])
    assert (update.status, update.starts_at) == ("firing", 0.0)
    assert "44.0% of the impressions" in update.annotations["summary"]


def test_check_alerts_and_regression_alerts_of_a_pair_live_side_by_side() -> None:
    book = AlertBook(CONFIG)
    notes = book.update(0.0, pair(name="regression"))
    assert sorted(n.labels["alertname"] for n in notes) == [
        "SearchRelevanceCanaryRegression", "SearchRelevanceCanaryRegression", "SearchRelevanceSampleRatioMismatch"]
    # the regression wavers to inconclusive: it is held; the mismatch, still flagged, keeps firing
    assert book.update(60.0, pair()) == []
    # the regression verdict stays inconclusive past the hold: it resolves, the mismatch does not
    resolved = book.update(700.0, pair())
    assert {n.labels["alertname"] for n in resolved} == {"SearchRelevanceCanaryRegression"}
    assert [n.labels["alertname"] for n in book.firing()] == ["SearchRelevanceSampleRatioMismatch"]


@pytest.mark.parametrize(("check", "note"), [
    (SRM, "SRM −9.6%"), (replace(SRM, flagged=False), "ratio ok"), (replace(SRM, estimate=None), "SRM"),
    (IMBALANCE, "imbalance −4.8%"), (replace(IMBALANCE, flagged=False), "balance ok"),
])
def test_check_notes(check: Check, note: str) -> None:
    assert check_note(check) == note


def test_check_severity_is_validated() -> None:
    with pytest.raises(ValueError, match="check_severity: expected a non-empty string, got ''"):
        AlertConfig(check_severity="")


RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


@pytest.mark.parametrize("name", sorted({*ALERTNAMES.values(), *CHECK_ALERTNAMES.values()}))
def test_every_direct_alert_has_a_runbook_and_so_does_its_prometheus_copy(name: str) -> None:
    copy = name.replace("Regression", "VerdictRegression") if name in ALERTNAMES.values() else f"{name}Exported"
    for runbook in (name, copy):
        text = (RUNBOOKS / f"{runbook}.md").read_text(encoding="utf-8")
        assert text.startswith(f"# {runbook}\n")
    assert f"({copy}.md)" in (RUNBOOKS / f"{name}.md").read_text(encoding="utf-8")  # each names the other
    assert f"({name}.md)" in (RUNBOOKS / f"{copy}.md").read_text(encoding="utf-8")
