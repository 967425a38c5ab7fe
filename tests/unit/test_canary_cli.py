"""``monitor canary``'s output without Redis: the table (each pair's overall verdict after its metrics, the
checks column, untrusted verdicts marked, the flagged checks' details) and ``--json`` (every comparison
with its reason, trust, checks and its pair's overall verdict)."""

from __future__ import annotations

import json
from dataclasses import replace

from monitor.core.canary import Check, Comparison, Verdict
from monitor.worker.canary_cli import rows, table

SRM = Check("sample_ratio", True, -0.096, None, None, 7.2, 0.5,
            "the canary has 45.20% of 20,000 impressions against 50.0% declared (−9.6%); log BF 7.2")
BALANCED = Check("covariate_balance", False, 0.01, -0.02, 0.04, 0.2, None, "in balance")
IMBALANCE = Check("covariate_balance", True, -0.048, -0.07, -0.026, 5.1, None, "queries differ")


def verdict(name: str, *checks: Check, trusted: bool = True, adjusted: float | None = None) -> Verdict:
    return Verdict(name, -0.05, -0.08, -0.02, 4.0, 900, 800, f"{name} because",  # type: ignore[arg-type]
                   adjusted=adjusted, checks=checks, trusted=trusted)


def pair(bucket: str, dcg: Verdict, pnr: Verdict, candidate: str = "ranker-b") -> list[Comparison]:
    return [Comparison(bucket, "dcg", "canary", "ranker-a", candidate, dcg),
            Comparison(bucket, "pnr", "canary", "ranker-a", candidate, pnr)]


FOUND = [*pair("head", verdict("pass", BALANCED, adjusted=0.83), verdict("pass")),
         *pair("tail", verdict("inconclusive", IMBALANCE, SRM, trusted=False),
               verdict("regression", SRM, trusted=False))]


def test_the_table_shows_each_pairs_overall_verdict_after_its_metrics() -> None:
    lines = table(FOUND).splitlines()
    assert lines[0].split() == ["bucket", "metric", "kind", "candidate", "baseline", "verdict", "change",
                                "interval", "sessions", "adjusted", "checks"]
    assert [line.split()[:2] for line in lines[1:7]] == [["head", "dcg"], ["head", "pnr"], ["head", "overall"],
                                                         ["tail", "dcg"], ["tail", "pnr"], ["tail", "overall"]]
    head_dcg, head_pnr, head_overall, tail_dcg, tail_pnr, tail_overall = lines[1:7]
    assert "pass" in head_overall and "800 vs 900" in head_overall
    assert head_dcg.endswith("83%       balance ok") and head_pnr.endswith("—")
    assert head_overall.endswith("balance ok")
    assert "inconclusive (untrusted)" in tail_dcg and "imbalance −4.8%, SRM −9.6%" in tail_dcg
    assert "regression (untrusted)" in tail_pnr and tail_pnr.endswith("SRM −9.6%")
    assert "regression (untrusted)" in tail_overall and tail_overall.endswith("imbalance −4.8%, SRM −9.6%")


def test_the_table_ends_with_the_details_of_each_flagged_check_once() -> None:
    text = table(FOUND)
    details = text.split("\nflagged checks:\n", 1)[1].splitlines()
    assert details == [
        "  tail canary ranker-b vs ranker-a: covariate balance: queries differ",
        "  tail canary ranker-b vs ranker-a: sample ratio: the canary has 45.20% of 20,000 impressions against "
        "50.0% declared (−9.6%); log BF 7.2",
    ]
    assert "flagged checks" not in table(FOUND[:2])


def test_json_keeps_every_comparison_with_its_checks_trust_and_overall_verdict() -> None:
    out = json.loads(json.dumps(rows(FOUND)))
    assert [(r["bucket"], r["metric"]) for r in out] == [("head", "dcg"), ("head", "pnr"), ("tail", "dcg"),
                                                          ("tail", "pnr")]  # one row per comparison, as before
    tail_dcg = out[2]
    assert tail_dcg["verdict"] == "inconclusive" and tail_dcg["trusted"] is False
    assert tail_dcg["reason"] == "inconclusive because"
    assert [c["name"] for c in tail_dcg["checks"]] == ["covariate_balance", "sample_ratio"]
    assert tail_dcg["checks"][1] == {"name": "sample_ratio", "flagged": True, "note": "SRM −9.6%",
                                     "estimate": -0.096, "lower": None, "upper": None, "evidence": 7.2,
                                     "expected": 0.5, "detail": SRM.detail}
    assert tail_dcg["overall"]["verdict"] == "regression" and tail_dcg["overall"]["trusted"] is False
    assert "PNR regressed" in tail_dcg["overall"]["reason"]
    assert out[0]["overall"] == {"verdict": "pass", "reason": "DCG and PNR passed", "trusted": True,
                                 "n_baseline": 900, "n_candidate": 800}
    assert out[1]["checks"] == [] and out[1]["trusted"] is True


def test_pairs_are_told_apart_by_candidate() -> None:
    found = [*pair("tail", verdict("pass"), verdict("pass"), "ranker-b"),
             *pair("tail", verdict("regression"), replace(verdict("pass")), "ranker-c")]
    overall = [line.split() for line in table(found).splitlines() if " overall " in line]
    assert [(o[3], o[5]) for o in overall] == [("ranker-b", "pass"), ("ranker-c", "regression")]
