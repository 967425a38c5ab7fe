"""Alerts from comparisons: labels, annotations, and the AlertBook's firing, updates and resolutions."""

from __future__ import annotations

import pytest

from monitor.core.canary import Comparison, Verdict
from monitor.core.canary.alerts import AlertBook, AlertConfig, Notification, annotations_of, desired_alerts

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
