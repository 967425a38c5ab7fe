"""``monitor evaluate``: formats, session files, and malformed input (exit 2, file:line: reason)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.offline.progress import Progress

EXAMPLES = Path(__file__).resolve().parents[2] / "monitor" / "examples"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["evaluate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "-m", "P@5")
    assert code == 0
    header, total = out.splitlines()
    assert header.split() == ["query", "P@5"] and total.split() == ["all", "0.5000"]


def test_json_has_canonical_keys_and_per_query(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "-m", "p@5",
                           "-m", "r@5", "-m", "map", "--format", "json", "--per-query")
    assert code == 0
    document = json.loads(out)
    assert set(document["aggregate"]) == {"P@5", "R@5", "AP"}
    assert document["per_query"]["q1"]["P@5"] == pytest.approx(3 / 5)  # seed 003: A, C, G in the top 5
    assert document["per_query"]["q1"]["R@5"] == pytest.approx(3 / 4)


def test_csv_is_long_format_with_full_precision(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "-m", "AP",
                           "--format", "csv", "--per-query")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "query,measure,value" and lines[-1].startswith("all,AP,")
    assert float(lines[-1].split(",")[2]) == pytest.approx((float(lines[1].split(",")[2]) +
                                                           float(lines[2].split(",")[2])) / 2)


def test_sessions_reproduce_the_seed_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--sessions", str(EXAMPLES / "sessions.jsonl"), "-m", "DCG@4", "-m",
                           "CG@4", "-m", "PNR", "-m", "PNR(ties=skip)", "-m", "nDCG@5", "--per-query",
                           "--format", "json")
    assert code == 0
    values = json.loads(out)["per_query"]
    assert values["s-dcg"]["DCG@4"] == pytest.approx(2.0223, abs=5e-5)
    assert values["s-dcg"]["CG@4"] == pytest.approx(3.0)
    assert values["s-pnr"]["PNR"] == 6.5 and values["s-pnr"]["PNR(ties=skip)"] == 4.5
    assert values["s-poor"]["nDCG@5"] == pytest.approx(1.0)  # poor documents in ideal order
    assert values["s-poor"]["PNR"] == "+Inf" and values["s-poor"]["PNR(ties=skip)"] is None


def test_sessions_ndcg_ideal_uses_query_level_labels_of_unshown_documents(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = [
        {"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 1763712000,
         "results": [{"doc_id": f"d{i}", "position": i + 1, "score": 10 - i} for i in range(6)]},
        {"type": "annotation", "query": "q", "grades": [{"doc_id": f"d{i}", "grade": g}
                                                         for i, g in enumerate([3, 2, 3, 0, 1, 2])]},
        {"type": "annotation", "query": "q", "grades": [{"doc_id": "x", "grade": 3}, {"doc_id": "y", "grade": 0}]},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    code, out, _ = run_cli(capsys, "--sessions", str(path), "--scale", "trec", "-m", "nDCG@6", "--format", "json")
    assert code == 0
    assert round(json.loads(out)["aggregate"]["nDCG@6"], 4) == 0.8184


def test_a_correction_replaces_the_earlier_grade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = [
        {"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "高"},  # before the impression
        {"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 1763712000,
         "results": [{"doc_id": "a", "position": 1, "score": 1.0}]},
        {"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "低"},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in events) + "\n")
    code, out, _ = run_cli(capsys, "--sessions", str(path), "-m", "DCG@1", "--format", "json")
    assert code == 0 and json.loads(out)["aggregate"]["DCG@1"] == pytest.approx(0.3)


BAD_RUNS = [
    ("q1 Q0 A 1 0.9 t\nq1 Q0 B 2 0.8\n", 2, "expected 6 fields"),
    ("q1 Q0 A 1 0.9 t\n\nq1 Q0 B 2 high t\n", 3, "score 'high' is not a number"),
    ("q1 Q0 A 1 nan t\n", 1, "not a finite number"),
    ("q1 Q0 A 1 0.9 t\nq1 Q0 A 2 0.8 t\n", 2, "document A retrieved twice for query q1"),
    ("q1 Q0 A 1 0.9 t\nq1 Q0 \xff 2 0.8 t\n", 2, "not UTF-8"),
]


@pytest.mark.parametrize(("content", "line", "reason"), BAD_RUNS)
def test_malformed_run_names_file_line_and_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  content: str, line: int, reason: str) -> None:
    run = tmp_path / "bad.run"
    run.write_bytes(content.encode("utf-8").replace("\xff".encode(), b"\xff"))
    code, out, err = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(run))
    assert code == 2 and out == ""
    assert f"{run}:{line}: " in err and reason in err


@pytest.mark.parametrize(("content", "line", "reason"), [
    ("q1 0 A 1\nq1 0 B\n", 2, "expected 4 fields"),
    ("q1 0 A 1\nq1 0 B x\n", 2, "unknown grade 'x'"),
    ("q1 0 A 1\nq1 0 A 0\n", 2, "document A judged twice for query q1"),
])
def test_malformed_qrels_names_file_line_and_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    content: str, line: int, reason: str) -> None:
    qrels = tmp_path / "bad.qrels"
    qrels.write_text(content)
    code, _, err = run_cli(capsys, str(qrels), str(EXAMPLES / "run.txt"))
    assert code == 2 and f"{qrels}:{line}: " in err and reason in err


@pytest.mark.parametrize(("line", "reason"), [
    ('{"type": "impression"', "not a JSON event ("),
    ('{"type": "click"}', "unknown event type 'click'"),
    ("[" * 100_000, "not a JSON event (nested too deeply)"),
])
def test_a_line_that_is_not_an_event_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         line: str, reason: str) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "高"}\n' + line + "\n")
    code, _, err = run_cli(capsys, "--sessions", str(path))
    assert code == 2 and f"{path}:2: " in err and reason in err and "Traceback" not in err


SESSION = ('{"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 1763712000, '
           '"results": [{"doc_id": "a", "position": 1}, {"doc_id": "b", "position": 2}]}\n'
           '{"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "高"}\n')


@pytest.mark.parametrize(("line", "reason"), [
    ('{"type": "annotation", "session_id": "s", "doc_id": "a", "grade": "超高"}',
     "unknown_grade: grade: unknown grade '超高'"),
    ('{"type": "impression", "session_id": "t", "query": "q", "ranker": "r", "ts": 1763712000, "results": '
     '[{"doc_id": "a", "position": 2, "score": 1}]}', "positions must be 1..1"),
    ('{"type": "impression", "schema": 9}', "unknown schema version 9"),
    ('{"type": "annotation", "session_id": "s", "doc_id": "b", "grade": "高", "x": ' + "[" * 10_000
     + "]" * 10_000 + "}", "invalid_json: invalid JSON: nested too deeply"),
    ('{"type": "annotation", "session_id": "\\ud800", "doc_id": "b", "grade": "高"}',
     "invalid_utf8: session_id: not UTF-8 (unpaired surrogate \\ud800"),
    ('{"type": "annotation", "session_id": "s", "doc_id": "b", "grade": ' + "1" * 5000 + "}",
     "invalid_json: invalid JSON: a number of more than 4,300 digits"),
    ('{"type": "annotation", "session_id": "s", "doc_id": "b", "grade": "无", "ts": 1e300}',
     "ts_out_of_range: ts: out of range"),
    ('{"type": "impression", "session_id": "t", "query": "q", "ranker": "r", "ts": "0001-01-01T00:00:00Z", '
     '"results": [{"doc_id": "a", "position": 1}]}', "invalid_value: ts: not a valid epoch time"),
])
def test_an_invalid_session_event_is_a_dead_letter_and_the_rest_is_evaluated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, reason: str) -> None:
    """The worker's dead letter, named FILE:LINE: code: field: reason, and the same numbers as without it."""
    clean, path = tmp_path / "clean.jsonl", tmp_path / "events.jsonl"
    clean.write_text(SESSION)
    path.write_bytes(b"\xef\xbb\xbf" + (SESSION + line + "\n").encode())  # a byte-order mark too
    code, expected, _ = run_cli(capsys, "--sessions", str(clean), "--format", "json")
    assert code == 0
    code, out, err = run_cli(capsys, "--sessions", str(path), "--format", "json")
    assert code == 0 and out == expected
    assert "1 invalid event(s) left out as dead letters" in err and f"{path}:3: " in err and reason in err


def test_bad_measure_and_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "-m", "nDCG@ten")
    assert code == 2 and "nDCG@ten" in err
    code, _, err = run_cli(capsys, str(tmp_path / "nope"), str(EXAMPLES / "run.txt"))
    assert code == 2 and "no such file" in err


def test_malformed_input_prints_no_traceback(tmp_path: Path) -> None:
    run = tmp_path / "bad.run"
    run.write_text("q1 Q0 A 1 0.9\n")
    done = subprocess.run([sys.executable, "-m", "monitor", "evaluate", str(EXAMPLES / "qrels.txt"), str(run)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"monitor evaluate: error: {run}:1: expected 6 fields (qid q0 docno rank score tag), got 5"


def test_progress_draws_only_when_enabled() -> None:
    stream = io.StringIO()
    progress = Progress(total=2, stream=stream, enabled=True)
    progress.step("reading run")
    progress.step("computing AP")
    progress.done()
    assert "reading run" in stream.getvalue() and "2/2" in stream.getvalue()
    quiet = io.StringIO()
    Progress(total=1, stream=quiet).step("x")  # a StringIO is not a terminal
    assert quiet.getvalue() == ""


def test_a_qrels_repeat_is_reported_before_a_malformed_run(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_text("q1 0 a 1\nq1 0 b 0\nq1 0 a 0\n")
    run.write_text("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 x t\n")
    code, out, err = run_cli(capsys, str(qrels), str(run))
    assert code == 2 and out == ""
    assert err == f"monitor evaluate: error: {qrels}:3: document a judged twice for query q1\n"


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("3", "3")])
def test_evaluate_asks_for_one_blas_thread_unless_told_otherwise(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, given: str | None, seen: str) -> None:
    """Set before the evaluator's modules import numpy (in a fresh process, before OpenBLAS starts)."""
    if given is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", given)
    code, _, _ = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "-m", "P@5")
    assert code == 0
    assert os.environ["OPENBLAS_NUM_THREADS"] == seen


@pytest.mark.parametrize("which", ["qrels", "run"])
def test_an_empty_file_is_called_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    files = [str(empty), str(EXAMPLES / "run.txt")] if which == "qrels" else [str(EXAMPLES / "qrels.txt"), str(empty)]
    code, _, err = run_cli(capsys, *files)
    fields = "qid iter docno grade" if which == "qrels" else "qid q0 docno rank score tag"
    assert code == 2 and f"{empty}: the file is empty: expected lines of" in err and fields in err


@pytest.mark.parametrize("which", ["qrels", "run"])
def test_a_file_of_blank_lines_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str) -> None:
    """Blank lines only: the fast reader finds no rows (no error of its own), and an empty table would look
    like an evaluation of nothing; it is refused as the empty file is."""
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n  \n\t\n")
    files = [str(blank), str(EXAMPLES / "run.txt")] if which == "qrels" else [str(EXAMPLES / "qrels.txt"), str(blank)]
    code, out, err = run_cli(capsys, *files)
    assert code == 2 and out == "" and f"{blank}: the file has only blank lines (3): expected lines of" in err


def test_a_byte_order_mark_is_read_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A UTF-8 byte-order mark (an editor on Windows writes one) is not part of the first query id."""
    code, expected, _ = run_cli(capsys, str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "run.txt"), "--per-query")
    paths = []
    for name in ("qrels.txt", "run.txt"):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + (EXAMPLES / name).read_bytes())
        paths.append(str(path))
    code_bom, out, _ = run_cli(capsys, *paths, "--per-query")
    assert code == code_bom == 0 and out == expected
