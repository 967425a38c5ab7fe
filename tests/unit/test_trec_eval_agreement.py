"""Agreement with trec_eval (through pytrec-eval-terrier) to 1e-9 per query.

Random graded runs with judged-but-unretrieved and retrieved-but-unjudged documents, tied scores (so
the doc-id tie-break matters), queries only in the run and queries only in the qrels; measured both
through the batch API and through ``monitor evaluate --format json``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import pytrec_eval

from monitor.core.batch import evaluate_batch
from monitor.core.grades import TrecScale
from monitor.core.measures import parse_measure
from monitor.offline.trec import read_qrels, read_run
from monitor.offline.trec_batch import batch_from_trec

# our measure -> trec_eval measure (as pytrec_eval names its output)
PAIRS = {
    "nDCG": "ndcg", "nDCG@5": "ndcg_cut_5", "nDCG@10": "ndcg_cut_10", "nDCG@20": "ndcg_cut_20",
    "P@5": "P_5", "P@10": "P_10", "P@30": "P_30", "R@5": "recall_5", "R@10": "recall_10",
    "R@100": "recall_100", "AP": "map", "RR": "recip_rank",
}
TREC_MEASURES = {"ndcg", "ndcg_cut.5,10,20", "P.5,10,30", "recall.5,10,100", "map", "recip_rank"}


def write_random_collection(directory: Path, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    qrels_lines, run_lines = [], []
    for q in range(rng.randint(1, 40)):
        qid = f"q{q}" if rng.random() < 0.5 else str(1000 - q)
        docs = [f"d{rng.randint(0, 10**rng.randint(1, 4))}" for _ in range(rng.randint(1, 60))]
        docs = list(dict.fromkeys(docs))
        in_qrels = rng.random() > 0.1
        in_run = rng.random() > 0.1 or not in_qrels
        if in_qrels:
            for doc in rng.sample(docs, rng.randint(1, len(docs))):  # judged, maybe never retrieved
                qrels_lines.append(f"{qid} 0 {doc} {rng.choice([0, 0, 1, 2, 3, 4])}")
        if in_run:
            retrieved = rng.sample(docs, rng.randint(1, len(docs)))  # maybe unjudged
            digits = rng.choice([0, 1, 2, 6])
            for rank, doc in enumerate(retrieved, start=1):
                score = round(rng.uniform(-5, 5), digits)
                run_lines.append(f"{qid}\tQ0 {doc}  {rank} {score} tag")
    rng.shuffle(run_lines)
    qrels, run = directory / f"qrels.{seed}", directory / f"run.{seed}"
    qrels.write_text("\n".join(qrels_lines) + "\n")
    run.write_text("\n".join(run_lines) + "\n")
    return qrels, run


def trec_eval(qrels: Path, run: Path) -> dict[str, dict[str, float]]:
    with qrels.open() as handle:
        judged = pytrec_eval.parse_qrel(handle)
    with run.open() as handle:
        retrieved = pytrec_eval.parse_run(handle)
    result: dict[str, dict[str, float]] = pytrec_eval.RelevanceEvaluator(judged, TREC_MEASURES).evaluate(
        retrieved)
    return result


@pytest.mark.parametrize("seed", range(40))
def test_batch_agrees_with_trec_eval_per_query(tmp_path: Path, seed: int) -> None:
    qrels_path, run_path = write_random_collection(tmp_path, seed)
    expected = trec_eval(qrels_path, run_path)
    batch = batch_from_trec(read_run(run_path), read_qrels(qrels_path, TrecScale()))
    measures = [parse_measure(m) for m in PAIRS]
    _, per_list = evaluate_batch(measures, batch)
    assert sorted(batch.keys) == sorted(expected)
    for g, qid in enumerate(batch.keys):
        for measure in measures:
            ours = per_list[measure][g]
            theirs = expected[qid][PAIRS[str(measure)]]
            assert ours == pytest.approx(theirs, abs=1e-9, rel=1e-9), (seed, qid, str(measure))


def test_cli_json_agrees_with_trec_eval(tmp_path: Path) -> None:
    qrels_path, run_path = write_random_collection(tmp_path, 12345)
    expected = trec_eval(qrels_path, run_path)
    args = [sys.executable, "-m", "monitor", "evaluate", str(qrels_path), str(run_path), "--format", "json",
            "--per-query"]
    for measure in PAIRS:
        args += ["-m", measure]
    out = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    assert set(out["aggregate"]) == set(PAIRS)
    for qid, values in expected.items():
        for ours, theirs in PAIRS.items():
            assert out["per_query"][qid][ours] == pytest.approx(values[theirs], abs=1e-9)
    for ours, theirs in PAIRS.items():
        mean = sum(v[theirs] for v in expected.values()) / len(expected)
        assert out["aggregate"][ours] == pytest.approx(mean, abs=1e-9)


def test_score_ties_break_by_doc_id_descending_like_trec_eval(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels"
    run = tmp_path / "run"
    qrels.write_text("q 0 a 1\nq 0 b 0\nq 0 c 0\n")
    run.write_text("q Q0 a 1 0.5 t\nq Q0 b 2 0.5 t\nq Q0 c 3 0.5 t\n")  # all tied: order c, b, a
    batch = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    _, per_list = evaluate_batch([parse_measure("RR")], batch)
    assert per_list[parse_measure("RR")] == [pytest.approx(1 / 3)]
    assert trec_eval(qrels, run)["q"]["recip_rank"] == pytest.approx(1 / 3)


def test_complete_counts_judged_queries_missing_from_the_run(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels"
    run = tmp_path / "run"
    qrels.write_text("q1 0 a 1\nq2 0 b 1\n")
    run.write_text("q1 Q0 a 1 1.0 t\n")
    plain = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    complete = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()), complete=True)
    measure = parse_measure("AP")
    assert evaluate_batch([measure], plain)[0][measure] == 1.0
    assert complete.keys == ["q1", "q2"]
    assert evaluate_batch([measure], complete)[0][measure] == 0.5


def test_scores_apart_only_past_float32_precision_do_not_tie(tmp_path: Path) -> None:
    """trec_eval 10 keeps scores as doubles: 1.000000002 ranks above 1.000000001 (RR 1/2). pytrec_eval
    0.5.11 rounds both to the same 32-bit float and breaks the tie by document id (z first: RR 1), so this
    case is checked against trec_eval's own answer, not pytrec_eval's."""
    qrels = tmp_path / "qrels"
    run = tmp_path / "run"
    qrels.write_text("q 0 z 1\nq 0 a 0\n")
    run.write_text("q Q0 z 1 1.000000001 t\nq Q0 a 2 1.000000002 t\n")
    batch = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    _, per_list = evaluate_batch([parse_measure("RR")], batch)
    assert per_list[parse_measure("RR")] == [0.5]
    assert trec_eval(qrels, run)["q"]["recip_rank"] == 1.0  # pytrec_eval's float32 tie
