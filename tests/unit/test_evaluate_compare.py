"""``monitor evaluate QRELS BASELINE RUN ...``: runs compared with a baseline (docs/evaluate.md, "Comparing
runs"), checked against the single-run path and scipy on small TREC files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats

from monitor.cli import main
from monitor.core.measures import parse_measure
from monitor.core.ranked_batch import RankedBatch
from monitor.core.run_comparison import compare_runs

QUERIES = [f"q{i:02d}" for i in range(12)]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["evaluate", *(str(a) for a in args)])
    out, err = capsys.readouterr()
    return code, out, err


def write_qrels(path: Path, queries: list[str] = QUERIES) -> Path:
    """Ten documents per query; d0..d3 relevant (grades 3, 2, 1, 1), the rest judged 0."""
    grades = [3, 2, 1, 1, 0, 0, 0, 0, 0, 0]
    path.write_text("".join(f"{q} 0 d{j} {g}\n" for q in queries for j, g in enumerate(grades)))
    return path


def write_run(path: Path, orders: dict[str, list[int]], extra: str = "") -> Path:
    """``orders``: per query, the documents (by number) in rank order."""
    lines = [f"{q} Q0 d{doc} {rank + 1} {100 - rank} tag\n" for q, docs in orders.items()
             for rank, doc in enumerate(docs)]
    path.write_text("".join(lines) + extra)
    return path


def shuffled(seed: int, queries: list[str] = QUERIES, strength: float = 0.0) -> dict[str, list[int]]:
    """Random orders; ``strength`` > 0 pulls the relevant documents up."""
    rng = np.random.default_rng(seed)
    orders = {}
    for q in queries:
        keys = rng.random(10) - strength * (np.arange(10) < 4) * rng.random(10)
        orders[q] = [int(d) for d in np.argsort(keys)]
    return orders


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "qrels": write_qrels(tmp_path / "qrels"),
        "base": write_run(tmp_path / "base.run", shuffled(1)),
        "better": write_run(tmp_path / "better.run", shuffled(2, strength=0.8)),
        "other": write_run(tmp_path / "other.run", shuffled(3, strength=0.2)),
    }


def per_query(capsys: pytest.CaptureFixture[str], qrels: Path, run: Path, measure: str,
              *options: str) -> dict[str, float]:
    code, out, _ = run_cli(capsys, qrels, run, "-m", measure, "--per-query", "--format", "json", *options)
    assert code == 0
    return {q: v[measure] for q, v in json.loads(out)["per_query"].items()}


def compare_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[dict[str, Any], str]:
    code, out, err = run_cli(capsys, *args, "--format", "json")
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document, err


def test_a_comparison_is_the_paired_t_test_of_the_single_run_values(
        files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = per_query(capsys, files["qrels"], files["base"], "nDCG@5")
    better = per_query(capsys, files["qrels"], files["better"], "nDCG@5")
    a, b = np.array([base[q] for q in QUERIES]), np.array([better[q] for q in QUERIES])
    expected = scipy.stats.ttest_rel(b, a)
    interval = expected.confidence_interval(0.95)
    document, err = compare_json(capsys, files["qrels"], files["base"], files["better"], "-m", "nDCG@5")
    assert err == ""
    assert document["baseline"] == "base.run" and document["runs"] == ["base.run", "better.run"]
    assert document["queries"] == 12 and document["missing"] == {"base.run": 0, "better.run": 0}
    rows = document["measures"]["nDCG@5"]
    assert rows["base.run"] == {"n": 12, "mean": pytest.approx(a.mean())}
    row = rows["better.run"]
    assert row["n"] == 12 and row["mean"] == pytest.approx(b.mean())
    assert row["baseline_mean"] == pytest.approx(a.mean())
    assert row["difference"] == pytest.approx(b.mean() - a.mean())
    assert row["relative_difference"] == pytest.approx((b.mean() - a.mean()) / a.mean())
    assert row["t"] == pytest.approx(expected.statistic, rel=1e-9)
    assert row["p_t"] == pytest.approx(expected.pvalue, abs=1e-9)
    assert row["ci"] == pytest.approx([interval.low, interval.high], abs=1e-9)
    assert row["p_adjusted"] == row["p_t"] and row["significant"] == (row["p_t"] < 0.05)
    assert 1 / 10_001 <= row["p_randomization"] <= 1 and row["note"] is None
    assert (document["alpha"], document["confidence"], document["test"], document["correction"],
            document["iterations"], document["seed"]) == (0.05, 0.95, "t", "none", 10_000, 0)


def test_the_table_has_a_row_per_measure_and_run(files: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, files["qrels"], files["base"], files["better"], files["other"],
                             "-m", "nDCG@5", "-m", "P@5")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["measure", "run", "n", "mean", "Δ", "Δ%", "95%", "CI", "of", "Δ", "p(t)",
                                "p(rand)", "sig"]
    assert lines[1].split()[:3] == ["nDCG@5", "base.run", "12"] and len(lines[1].split()) == 4
    better = lines[2].split()
    assert better[:2] == ["better.run", "12"] and better[-1] == "*"  # a clear improvement
    assert better[3].startswith("+") and better[5].startswith("[+")
    assert lines[4].split()[:2] == ["P@5", "base.run"] and lines[6].split()[0] == "other.run"
    assert "baseline base.run; 12 queries in every run; *: p < 0.05 (paired t-test)." in out
    assert "randomization test, 10000 random sign flips (every flip if fewer), seed 0." in out


def test_csv_has_one_row_per_measure_and_run(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, files["qrels"], files["base"], files["better"], "-m", "P@5", "--format", "csv")
    assert code == 0
    header, base, better = (line.split(",") for line in out.splitlines())
    assert header == ["measure", "run", "n", "mean", "baseline_mean", "difference", "relative_difference",
                      "ci_low", "ci_high", "t", "p_t", "p_randomization", "p_adjusted", "significant", "note"]
    assert base[:3] == ["P@5", "base.run", "12"] and base[4:] == [""] * 11
    assert better[:2] == ["P@5", "better.run"] and better[-2] in {"true", "false"} and better[-1] == ""
    assert float(better[5]) == pytest.approx(float(better[3]) - float(base[3]))


def test_identical_runs_differ_by_nothing(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    copy = tmp_path / "copy.run"
    copy.write_bytes(files["base"].read_bytes())
    document, _ = compare_json(capsys, files["qrels"], files["base"], copy, "-m", "AP", "-m", "PNR")
    for measure in ("AP", "PNR"):
        row = document["measures"][measure]["copy.run"]
        assert row["difference"] == 0.0 and row["relative_difference"] == 0.0
        assert row["p_t"] == 1.0 and row["p_randomization"] == 1.0 and row["ci"] == [0.0, 0.0]
        assert row["significant"] is False and row["note"] is None


def test_one_query_has_no_t_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = write_qrels(tmp_path / "qrels", ["q1"])
    a = write_run(tmp_path / "a.run", {"q1": [9, 8, 0, 1, 2]})
    b = write_run(tmp_path / "b.run", {"q1": [0, 1, 2, 3, 4]})
    code, out, _ = run_cli(capsys, qrels, a, b, "-m", "P@5")
    assert code == 0
    row = next(line for line in out.splitlines() if line.lstrip().startswith("b.run"))
    assert row.split() == ["b.run", "1", "0.8000", "+0.2000", "+33.33%", "-", "-", "1.0000"]
    assert "note: P@5, b.run: one query: no variance, no t-test" in out


def test_equal_differences_say_zero_variance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries = QUERIES[:6]
    qrels = write_qrels(tmp_path / "qrels", queries)
    a = write_run(tmp_path / "a.run", {q: [0, 4, 5, 6, 7] for q in queries})  # P@5 = 0.2 everywhere
    b = write_run(tmp_path / "b.run", {q: [0, 1, 5, 6, 7] for q in queries})  # 0.4 everywhere
    document, _ = compare_json(capsys, qrels, a, b, "-m", "P@5")
    row = document["measures"]["P@5"]["b.run"]
    assert row["difference"] == pytest.approx(0.2) and row["t"] is None and row["p_t"] is None
    assert row["ci"] is None and row["significant"] is None
    assert row["note"] == "every query's difference is +0.2: zero variance, no t-test"
    assert row["p_randomization"] == 2 / 64  # exact: all-plus and all-minus of the 64 flips
    code, out, _ = run_cli(capsys, qrels, a, b, "-m", "P@5", "--test", "randomization")
    assert code == 0 and out.splitlines()[2].rstrip().endswith("*")  # 1/32 < 0.05


def test_a_run_missing_queries(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --complete, a judged query missing from a run is left out of every comparison (as the
    single-run path ignores it); with --complete it counts as 0 in that run, as trec_eval -c."""
    partial = write_run(tmp_path / "partial.run", {q: o for q, o in shuffled(4, strength=0.5).items()
                                                   if q not in ("q00", "q05")})
    document, err = compare_json(capsys, files["qrels"], files["base"], partial, files["better"], "-m", "AP")
    assert document["queries"] == 10
    assert document["missing"] == {"base.run": 0, "partial.run": 2, "better.run": 0}
    assert err == ("monitor evaluate: partial.run lacks 2 judged queries evaluated in another run, left out "
                   "of the comparison (--complete counts a judged query missing from a run as 0)\n")
    base = per_query(capsys, files["qrels"], files["base"], "AP")
    kept = [q for q in QUERIES if q not in ("q00", "q05")]
    rows = document["measures"]["AP"]
    assert rows["base.run"]["mean"] == pytest.approx(np.mean([base[q] for q in kept]))
    assert rows["better.run"]["n"] == rows["partial.run"]["n"] == 10

    complete, err = compare_json(capsys, files["qrels"], files["base"], partial, "-m", "AP", "--complete")
    assert err == "" and complete["queries"] == 12
    single = per_query(capsys, files["qrels"], partial, "AP", "--complete")
    assert single["q00"] == single["q05"] == 0.0
    expected = scipy.stats.ttest_rel([single[q] for q in QUERIES], [base[q] for q in QUERIES])
    assert complete["measures"]["AP"]["partial.run"]["p_t"] == pytest.approx(expected.pvalue, abs=1e-9)


def test_a_query_without_judgments_changes_nothing(files: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    extra = write_run(tmp_path / "extra.run", shuffled(2, strength=0.8),
                      extra="unjudged Q0 d1 1 5.0 tag\nunjudged Q0 d2 2 4.0 tag\n")
    with_extra, err = compare_json(capsys, files["qrels"], files["base"], extra, "-m", "nDCG@5", "-m", "PNR")
    assert err == "" and with_extra["queries"] == 12 and with_extra["missing"]["extra.run"] == 0
    without, _ = compare_json(capsys, files["qrels"], files["base"], files["better"], "-m", "nDCG@5", "-m", "PNR")
    for measure in ("nDCG@5", "PNR"):
        assert with_extra["measures"][measure]["extra.run"] == without["measures"][measure]["better.run"]


def test_pnr_is_compared_as_a_ratio_of_summed_pairs(files: dict[str, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    single = {name: run_cli(capsys, files["qrels"], files[name], "-m", "PNR", "--format", "json")
              for name in ("base", "better")}
    values = {name: json.loads(out)["aggregate"]["PNR"] for name, (_, out, _) in single.items()}
    document, _ = compare_json(capsys, files["qrels"], files["base"], files["better"], "-m", "PNR")
    rows = document["measures"]["PNR"]
    assert rows["base.run"]["mean"] == pytest.approx(values["base"])  # as `monitor evaluate` of one run
    assert rows["better.run"]["difference"] == pytest.approx(values["better"] - values["base"])
    assert rows["better.run"]["p_t"] is not None and rows["better.run"]["p_randomization"] is not None


def test_an_infinite_pnr_is_not_tested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries = QUERIES[:4]
    qrels = write_qrels(tmp_path / "qrels", queries)
    ideal = write_run(tmp_path / "ideal.run", {q: list(range(10)) for q in queries})  # no discordant pair
    other = write_run(tmp_path / "other.run", shuffled(5, queries))
    document, _ = compare_json(capsys, qrels, other, ideal, "-m", "PNR")
    row = document["measures"]["PNR"]["ideal.run"]
    assert row["mean"] == "+Inf" and row["difference"] is None and row["p_t"] is None
    assert row["p_randomization"] is None and row["significant"] is None
    assert row["note"] == "PNR is +Inf or undefined in one of the runs (no discordant pair): no difference to test"


def test_holm_adjusts_over_the_runs_compared(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = (files["qrels"], files["base"], files["better"], files["other"], "-m", "P@5")
    plain, _ = compare_json(capsys, *args)
    holm, _ = compare_json(capsys, *args, "--correction", "holm")
    p = [plain["measures"]["P@5"][run]["p_t"] for run in ("better.run", "other.run")]
    low, high = sorted(p)
    expected = {low: min(1.0, 2 * low), high: min(1.0, max(2 * low, high))}
    for run, value in zip(("better.run", "other.run"), p, strict=True):
        row = holm["measures"]["P@5"][run]
        assert row["p_t"] == value and row["p_adjusted"] == pytest.approx(expected[value])
        assert row["significant"] == (row["p_adjusted"] < 0.05)
    code, out, _ = run_cli(capsys, *args, "--correction", "bonferroni")
    assert code == 0 and "p(bonferroni)" in out.splitlines()[0]


def test_the_randomization_test_is_deterministic_given_the_seed(files: dict[str, Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    args = (files["qrels"], files["base"], files["other"], "-m", "nDCG@5", "--test", "randomization",
            "--iterations", "2000")
    first, _ = compare_json(capsys, *args, "--seed", "7")
    again, _ = compare_json(capsys, *args, "--seed", "7")
    row = first["measures"]["nDCG@5"]["other.run"]
    assert again == first and first["iterations"] == 2000 and first["test"] == "randomization"
    assert row["p_adjusted"] == row["p_randomization"]
    assert row["p_randomization"] * 2001 == pytest.approx(round(row["p_randomization"] * 2001))


@pytest.mark.parametrize(("extra", "message"), [
    (["--alpha", "0.1"], "--alpha: for comparing runs, give QRELS BASELINE RUN [RUN ...]"),
    (["--seed", "3", "--test", "t"], "--test, --seed: for comparing runs"),
])
def test_comparison_options_need_two_runs(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                          extra: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, files["qrels"], files["base"], *extra)
    assert code == 2 and out == "" and message in err


def test_refusals(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, better = files["base"], files["better"]
    cases = [
        ([files["qrels"], base, better, "--per-query"], "--per-query prints one run's values"),
        ([files["qrels"], base, base], "a run file is given twice"),
        ([files["qrels"], base, better, "--alpha", "1.5"], "alpha must be in (0, 1), got 1.5"),
        ([files["qrels"], base, better, "--iterations", "0"], "iterations must be at least 1"),
        ([files["qrels"], base, tmp_path / "nope.run"], "no such file"),
        ([base, better, "--sessions", tmp_path / "x.jsonl"], "not both"),
    ]
    for args, message in cases:
        code, out, err = run_cli(capsys, *args)
        assert code == 2 and out == "" and message in err, (args, err)
    bad = tmp_path / "bad.run"
    bad.write_text("q00 Q0 d1 1 0.5\n")
    code, _, err = run_cli(capsys, files["qrels"], base, bad)
    assert code == 2 and f"{bad}:1: expected 6 fields" in err


def test_no_query_in_every_run_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = write_qrels(tmp_path / "qrels", ["q1", "q2"])
    a = write_run(tmp_path / "a.run", {"q1": [0, 1]})
    b = write_run(tmp_path / "b.run", {"q2": [0, 1]})
    code, out, err = run_cli(capsys, qrels, a, b)
    assert code == 2 and out == "" and "no judged query is in every run" in err
    code, out, _ = run_cli(capsys, qrels, a, b, "--complete", "-m", "P@5")
    assert code == 0 and "2 queries in every run" in out


def test_runs_with_the_same_file_name_are_named_by_path(files: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "v2").mkdir()
    same = write_run(tmp_path / "v2" / "base.run", shuffled(2, strength=0.8))
    document, _ = compare_json(capsys, files["qrels"], files["base"], same, "-m", "P@5")
    assert document["runs"] == [str(files["base"]), str(same)]


def test_an_undefined_value_pairs_only_queries_defined_in_both(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """AUC is undefined on a list of one class: such a query has no pair, the others are compared."""
    queries = QUERIES[:5]
    qrels = write_qrels(tmp_path / "qrels", queries)
    orders_a = shuffled(6, queries)
    orders_a["q01"] = [5, 6, 7]  # judged 0 only: AUC undefined in a
    a = write_run(tmp_path / "a.run", orders_a)
    b = write_run(tmp_path / "b.run", shuffled(7, queries, strength=0.5))
    values_a = per_query(capsys, qrels, a, "AUC")
    values_b = per_query(capsys, qrels, b, "AUC")
    assert values_a["q01"] is None and None not in values_b.values()
    paired = [q for q in queries if q != "q01"]
    document, _ = compare_json(capsys, qrels, a, b, "-m", "AUC")
    rows = document["measures"]["AUC"]
    assert document["queries"] == 5 and rows["a.run"]["n"] == 4 and rows["b.run"]["n"] == 4
    assert rows["b.run"]["baseline_mean"] == pytest.approx(np.mean([values_a[q] for q in paired]))
    assert rows["b.run"]["mean"] == pytest.approx(np.mean([values_b[q] for q in paired]))
    expected = scipy.stats.ttest_rel([values_b[q] for q in paired], [values_a[q] for q in paired])
    assert rows["b.run"]["p_t"] == pytest.approx(expected.pvalue, abs=1e-9)


def test_compare_runs_needs_a_baseline_and_another_run() -> None:
    with pytest.raises(ValueError, match="at least one other run"):
        compare_runs([parse_measure("P@5")], {"only": RankedBatch.from_lists([], [], 1.0)})
