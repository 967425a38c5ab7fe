"""The demo's canary block in the live view and the summary: each pair's overall verdict, untrusted
verdicts marked, flagged checks noted (synthetic rows: the simulated split is sound, so no check flags in
a real run), and alert lines for the checks' alerts, which carry no metric."""

from __future__ import annotations

import json

from monitor.core.canary import Check
from monitor.demo.summary import overall_lines
from monitor.demo.verdict_rows import AlertNote, VerdictRow, overall_rows
from monitor.demo.view import alert_line, verdict_lines

SRM = Check("sample_ratio", True, -0.096, None, None, 7.2, 0.5, "the canary has 45.20% of 20,000 impressions")
BALANCED = Check("covariate_balance", False, 0.01, -0.02, 0.04, 0.2, None, "in balance")


def row(bucket: str, metric: str, verdict: str, *checks: Check, trusted: bool = True,
        candidate: str = "ranker-b", kind: str = "canary") -> VerdictRow:
    return VerdictRow(bucket, metric, kind, "ranker-a", candidate, verdict, -0.05, -0.08, -0.02, 900, 800,
                      f"{verdict} because", None, trusted, checks)


ROWS = [row("head", "dcg", "pass", BALANCED), row("head", "pnr", "pass"),
        row("tail", "dcg", "inconclusive", BALANCED, SRM, trusted=False),
        row("tail", "pnr", "regression", SRM, trusted=False)]


def test_overall_rows_give_one_verdict_per_pair_with_its_checks_once() -> None:
    head, tail = overall_rows(ROWS)
    assert (head.bucket, head.verdict, head.trusted, head.reason) == ("head", "pass", True, "DCG and PNR passed")
    assert [c.name for c in head.checks] == ["covariate_balance"] and head.flagged == []
    assert (tail.verdict, tail.trusted) == ("regression", False)
    assert [c.name for c in tail.checks] == ["covariate_balance", "sample_ratio"] and tail.flagged == [SRM]
    as_json = json.loads(json.dumps(tail.to_json()))
    assert as_json["checks"][1]["note"] == "SRM −9.6%" and as_json["checks"][0]["note"] == "balance ok"
    assert ROWS[2].to_json()["trusted"] is False and ROWS[2].to_json()["checks"][1]["flagged"] is True


def test_the_view_shows_the_overall_verdict_marks_untrusted_verdicts_and_notes_flagged_checks() -> None:
    lines = verdict_lines(ROWS)
    assert lines[0] == ("  head   dcg  -5.0% [-8.0%, -2.0%] PASS   pnr  -5.0% [-8.0%, -2.0%] PASS   "
                        "overall PASS")
    assert lines[1] == ("  tail   dcg  -5.0% [-8.0%, -2.0%] INCONCLUSIVE*   pnr  -5.0% [-8.0%, -2.0%] "
                        "REGRESSION*   overall REGRESSION*   [SRM −9.6%]")
    assert lines[2].startswith("  * not trusted")
    assert len(verdict_lines(ROWS[:2])) == 1  # all trusted: no footnote


def test_the_view_names_the_pair_when_a_bucket_has_several() -> None:
    lines = verdict_lines([*ROWS[:2], row("head", "dcg", "pass", kind="deploy", candidate="ranker-c"),
                           row("head", "pnr", "inconclusive", kind="deploy", candidate="ranker-c")])
    assert [line.split()[:3] for line in lines] == [["head", "canary", "ranker-b"], ["head", "deploy", "ranker-c"]]
    assert lines[1].endswith("overall INCONCLUSIVE")


def test_the_summary_lists_each_pair_its_checks_and_the_flagged_details() -> None:
    lines = overall_lines([o.to_json() for o in overall_rows(ROWS)])
    assert lines[0].split() == ["overall", "per", "pair", "verdict", "checks", "why"]
    assert lines[1].split() == ["head", "canary", "ranker-b", "pass", "balance", "ok", "DCG", "and", "PNR", "passed"]
    assert lines[2].startswith("tail   canary ranker-b    regression*   balance ok, SRM −9.6%")
    assert lines[2].endswith("PNR regressed; not trusted: sample ratio mismatch")
    assert lines[3] == "  tail ranker-b: sample ratio: the canary has 45.20% of 20,000 impressions"
    assert lines[4].startswith("  * not trusted")


def test_alert_lines_name_the_metric_of_a_regression_and_the_kind_of_a_check() -> None:
    regression = AlertNote("firing", {"alertname": "SearchRelevanceCanaryRegression", "bucket": "tail",
                                      "metric": "dcg"}, {"summary": "s"}, 1_763_712_000.0, 3.25)
    assert alert_line(regression) == ("ALERT FIRING SearchRelevanceCanaryRegression bucket=tail metric=dcg at "
                                      "2025-11-21T08:00:00Z (event time), +3.2 s wall: s")
    check = AlertNote("firing", {"alertname": "SearchRelevanceSampleRatioMismatch", "bucket": "tail",
                                 "kind": "canary"}, {}, 1_763_712_000.0, 3.25)
    assert alert_line(check).startswith("ALERT FIRING SearchRelevanceSampleRatioMismatch bucket=tail kind=canary at")
