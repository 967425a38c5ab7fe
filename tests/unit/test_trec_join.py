"""The sort-based join of a TREC run with its qrels (``batch_from_trec``) against a plain-Python reference.

The join sorts qrels and run rows together once on (query, document id): neighbours with the same key
are a judgment or a repeated document; the run rows, already in document id descending order, are then
stably sorted by (query, score descending). These tests build the same lists with dicts and ``sorted``
on random collections full of score ties (including 0.0 and -0.0), documents judged for other queries,
queries only in the run or only in the qrels and shuffled lines, and compare them element by element;
the measures are compared with trec_eval (pytrec_eval) to 1e-12.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.batch import evaluate_batch
from monitor.core.grades import TrecScale
from monitor.core.measures import parse_measure
from monitor.offline import trec_batch
from monitor.offline.byte_strings import ByteStrings
from monitor.offline.errors import InputError
from monitor.offline.trec import read_qrels, read_run
from monitor.offline.trec_batch import batch_from_trec, trec_order

PAIRS = {"nDCG": "ndcg", "nDCG@10": "ndcg_cut_10", "P@10": "P_10", "R@10": "recall_10", "AP": "map",
         "RR": "recip_rank"}
TREC_MEASURES = {"ndcg", "ndcg_cut.10", "P.10", "recall.10", "map", "recip_rank"}


def write_tied_collection(directory: Path, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    shared = [f"d{i}" for i in range(rng.randint(1, 30))]  # the same ids judged for several queries
    qrels_lines, run_lines = [], []
    for _ in range(rng.randint(1, 25)):
        qid = f"q{rng.randint(0, 99)}"
        if any(line.split()[0] == qid for line in qrels_lines + run_lines):
            continue
        docs = list(dict.fromkeys(rng.choice(shared) if rng.random() < 0.7 else f"x{rng.randint(0, 999)}"
                                  for _ in range(rng.randint(1, 40))))
        if rng.random() > 0.15:
            for doc in rng.sample(docs, rng.randint(1, len(docs))):
                qrels_lines.append(f"{qid} 0 {doc} {rng.choice([0, 0, 1, 2, 3])}")
        if rng.random() > 0.15 or not qrels_lines or qrels_lines[-1].split()[0] != qid:
            for rank, doc in enumerate(rng.sample(docs, rng.randint(1, len(docs))), start=1):
                score = rng.choice(["0.0", "-0.0", "1", "1.0", "0.5", "-2", "3.25"])  # many ties
                run_lines.append(f"{qid} Q0 {doc} {rank} {score} tag")
    rng.shuffle(qrels_lines)
    rng.shuffle(run_lines)
    qrels, run = directory / f"qrels.{seed}", directory / f"run.{seed}"
    qrels.write_text("\n".join(qrels_lines) + "\n")
    run.write_text("\n".join(run_lines) + "\n")
    return qrels, run


def reference_lists(qrels: Path, run: Path) -> dict[str, list[tuple[float, str, float]]]:
    """Per evaluated query: (score, docno, grade or 0) in trec_eval's order, by dicts and sorted()."""
    grades: dict[str, dict[str, float]] = {}
    for line in qrels.read_text().split("\n"):
        if line:
            qid, _, doc, grade = line.split()
            grades.setdefault(qid, {})[doc] = float(grade)
    retrieved: dict[str, list[tuple[float, str]]] = {}
    for line in run.read_text().split("\n"):
        if line:
            qid, _, doc, _, score, _ = line.split()
            retrieved.setdefault(qid, []).append((float(score), doc))
    lists = {}
    for qid in sorted(set(grades) & set(retrieved)):
        ordered = sorted(retrieved[qid], key=lambda pair: pair[1].encode(), reverse=True)
        ordered = sorted(ordered, key=lambda pair: -pair[0])  # stable: doc id descending within ties
        lists[qid] = [(score, doc, grades[qid].get(doc, 0.0)) for score, doc in ordered]
    return lists


@pytest.mark.parametrize("seed", range(60))
def test_join_orders_and_judges_like_the_reference(tmp_path: Path, seed: int) -> None:
    qrels, run = write_tied_collection(tmp_path, seed)
    batch = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    expected = reference_lists(qrels, run)
    assert list(batch.keys) == list(expected)
    for g, qid in enumerate(batch.keys):
        lo, hi = int(batch.offsets[g]), int(batch.offsets[g + 1])
        assert batch.scores[lo:hi].tolist() == [score for score, _, _ in expected[qid]]
        assert batch.gains[lo:hi].tolist() == [grade for _, _, grade in expected[qid]]


@pytest.mark.parametrize("seed", range(60))
def test_tied_collections_agree_with_trec_eval_to_1e_12(tmp_path: Path, seed: int) -> None:
    qrels, run = write_tied_collection(tmp_path, seed)
    batch = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    with qrels.open() as handle:
        judged = pytrec_eval.parse_qrel(handle)
    with run.open() as handle:
        retrieved = pytrec_eval.parse_run(handle)
    expected = pytrec_eval.RelevanceEvaluator(judged, TREC_MEASURES).evaluate(retrieved)
    _, per_list = evaluate_batch([parse_measure(m) for m in PAIRS], batch)
    assert sorted(expected) == sorted(batch.keys)
    for ours, theirs in PAIRS.items():
        mine = np.array(per_list[parse_measure(ours)], dtype=np.float64)
        reference = np.array([expected[qid][theirs] for qid in batch.keys], dtype=np.float64)
        assert np.abs(mine - reference).max(initial=0.0) <= 1e-12, ours


@pytest.mark.parametrize(("run_text", "line", "doc", "query"), [
    ("q9 Q0 a 1 1 t\nq1 Q0 a 1 1 t\nq9 Q0 a 2 0.5 t\n", 3, "a", "q9"),  # q9 is only in the run
    ("q1 Q0 b 1 1 t\nq1 Q0 a 2 2 t\nq1 Q0 b 3 1 t\n", 3, "b", "q1"),  # judged, same score
    ("q1 Q0 a 1 1 t\nq2 Q0 a 1 1 t\nq1 Q0 a 2 0 t\n", 3, "a", "q1"),  # judged, different score
    ("q1 Q0 z 1 1 t\nq1 Q0 z 2 1 t\n", 2, "z", "q1"),  # unjudged
])
def test_a_document_twice_for_one_query_names_the_second_line(tmp_path: Path, run_text: str, line: int,
                                                               doc: str, query: str) -> None:
    qrels = tmp_path / "qrels"
    run = tmp_path / "run"
    qrels.write_text("q1 0 a 1\nq1 0 b 0\nq2 0 a 2\n")
    run.write_text(run_text)
    with pytest.raises(InputError) as caught:
        batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    assert str(caught.value) == f"{run}:{line}: document {doc} retrieved twice for query {query}"


@pytest.mark.parametrize(("qrels_text", "line"), [
    ("q1 0 a 1\nq7 0 c 0\nq1 0 b 0\nq7 0 c 2\n", 4),  # q7 is not in the run
    ("q1 0 a 1\nq1 0 a 0\n", 2),
])
def test_a_document_judged_twice_is_reported_before_a_run_repeat(tmp_path: Path, qrels_text: str,
                                                                 line: int) -> None:
    qrels = tmp_path / "qrels"
    run = tmp_path / "run"
    qrels.write_text(qrels_text)
    run.write_text("q1 Q0 a 1 1 t\nq1 Q0 a 2 1 t\n")
    with pytest.raises(InputError) as caught:
        batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    doc, query = qrels_text.split("\n")[line - 1].split()[2::-2]
    assert str(caught.value) == f"{qrels}:{line}: document {doc} judged twice for query {query}"


def test_files_parsed_in_several_blocks_join_like_the_reference(tmp_path: Path) -> None:
    """Over 1 MiB, so the reader returns several chunks per column (the benchmark's case)."""
    rng = random.Random(5)
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    with qrels.open("w") as q_out, run.open("w") as r_out:
        for q in range(1500):
            docs = list(dict.fromkeys(f"doc{rng.randrange(3000)}" for _ in range(40)))
            q_out.writelines(f"q{q} 0 {d} {rng.choice((0, 1, 2))}\n" for d in rng.sample(docs, 15))
            r_out.writelines(f"q{q} Q0 {d} {r} {rng.choice((0.25, 0.5, 1.0))} t\n" for r, d in enumerate(docs))
    assert run.stat().st_size > 1 << 20
    run_data = read_run(run)
    assert run_data.docno.num_chunks > 1
    batch = batch_from_trec(run_data, read_qrels(qrels, TrecScale()))
    expected = reference_lists(qrels, run)
    assert list(batch.keys) == list(expected)
    assert batch.gains.tolist() == [grade for qid in expected for _, _, grade in expected[qid]]
    assert batch.scores.tolist() == [score for qid in expected for score, _, _ in expected[qid]]


# Scores equal but for their last bits (the order's sort key cuts low bits to make room for the list),
# signed zeros, subnormals, and plain ties.
CLOSE_SCORES = ["1", "1.0000000000000002", "1.0000000000000004", "0.9999999999999999", "0.0", "-0.0",
                "5e-324", "-5e-324", "1e-300", "-1e300", "1e300", "2", "-2.0000000000000004"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.sampled_from(CLOSE_SCORES),
                          st.binary(max_size=20).map(lambda b: bytes(x % 4 + 97 for x in b))),
                max_size=80),
       st.integers(1, 3) | st.integers(1, 5001), st.integers(1, 12))
def test_trec_order_is_list_then_score_then_docno_descending(
        rows: list[tuple[int, str, bytes]], n_lists: int, tie_chunk: int) -> None:
    rows = [(lst % n_lists, score, doc) for lst, score, doc in rows]
    lists = np.array([lst for lst, _, _ in rows], dtype=np.int64)
    scores = np.array([float(score) for _, score, _ in rows], dtype=np.float64)
    docs = [doc for _, _, doc in rows]
    offsets = np.cumsum([0] + [len(d) for d in docs]).astype(np.int32)
    strings = ByteStrings.from_parts([(offsets, np.frombuffer(b"".join(docs), dtype=np.uint8))])
    order = trec_order(lists, n_lists, scores, strings, tie_chunk=tie_chunk).tolist()
    expected = sorted(range(len(rows)), key=lambda i: docs[i], reverse=True)  # then stable sorts:
    expected = sorted(expected, key=lambda i: -scores[i])
    expected = sorted(expected, key=lambda i: lists[i])
    assert [(lists[i], scores[i], docs[i]) for i in order] == [(lists[i], scores[i], docs[i]) for i in expected]
    subset = np.arange(0, len(rows), 2, dtype=np.int64)
    assert trec_order(lists, n_lists, scores, strings, subset, tie_chunk).tolist() == [
        i for i in expected if i % 2 == 0]


@pytest.mark.parametrize("seed", range(20))
def test_many_queries_with_scores_equal_but_for_their_last_bits(tmp_path: Path, seed: int) -> None:
    """3,000 queries: the order's key keeps 12 bits for the list, so these scores tie in the key."""
    rng = random.Random(seed)
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    with qrels.open("w") as q_out, run.open("w") as r_out:
        for q in range(3000):
            docs = list(dict.fromkeys(f"d{rng.randrange(30)}" for _ in range(rng.randint(1, 8))))
            q_out.writelines(f"q{q} 0 {d} {rng.choice((0, 1, 2))}\n" for d in rng.sample(docs, 1))
            r_out.writelines(f"q{q} Q0 {d} {r} {rng.choice(CLOSE_SCORES)} t\n" for r, d in enumerate(docs))
    batch = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    expected = reference_lists(qrels, run)
    assert list(batch.keys) == list(expected)
    assert batch.scores.tolist() == [score for qid in expected for score, _, _ in expected[qid]]
    assert batch.gains.tolist() == [grade for qid in expected for _, _, grade in expected[qid]]


WEAK_HASHES: dict[str, Callable[[ByteStrings], npt.NDArray[np.uint64]]] = {
    "constant": lambda strings: np.zeros(len(strings), dtype=np.uint64),
    "length only": lambda strings: strings.lengths(slice(0, len(strings))).astype(np.uint64) << np.uint64(50),
}


def weak_keys(name: str) -> Callable[..., npt.NDArray[np.uint64]]:
    """``ByteStrings.keys`` with the hash replaced by a weak one (the prefix kept as it is)."""
    def keys(strings: ByteStrings, prefix: npt.NDArray[np.int32], bits: int,
             out: npt.NDArray[np.uint64] | None = None) -> npt.NDArray[np.uint64]:
        made = (prefix.astype(np.uint64) << np.uint64(64 - bits)) | (WEAK_HASHES[name](strings) >> np.uint64(bits))
        if out is None:
            return made
        out[...] = made
        return out
    return keys


@pytest.mark.parametrize("weak", list(WEAK_HASHES))
@pytest.mark.parametrize("seed", range(15))
def test_hash_collisions_fall_back_to_the_string_join(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      weak: str, seed: int) -> None:
    """With a hash that pairs different ids, the join is redone on the strings: same lists, same values."""
    qrels, run = write_tied_collection(tmp_path, seed)
    monkeypatch.setattr(ByteStrings, "keys", weak_keys(weak))
    fallbacks = []
    by_strings = trec_batch._match_by_strings
    monkeypatch.setattr(trec_batch, "_match_by_strings", lambda *args: fallbacks.append(1) or by_strings(*args))
    batch = batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    expected = reference_lists(qrels, run)
    assert fallbacks or weak != "constant"  # the constant hash pairs two different ids in every collection
    assert list(batch.keys) == list(expected)
    for g, qid in enumerate(batch.keys):
        lo, hi = int(batch.offsets[g]), int(batch.offsets[g + 1])
        assert batch.scores[lo:hi].tolist() == [score for score, _, _ in expected[qid]]
        assert batch.gains[lo:hi].tolist() == [grade for _, _, grade in expected[qid]]


@pytest.mark.parametrize(("run_text", "line"), [
    ("q1 Q0 ab 1 1 t\nq1 Q0 ba 1 1 t\nq1 Q0 ab 2 0.5 t\n", 3),
    ("q1 Q0 zz 1 1 t\nq1 Q0 a 1 1 t\nq1 Q0 zz 2 0.5 t\n", 3),
])
def test_repeats_are_found_when_hashes_collide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               run_text: str, line: int) -> None:
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_text("q1 0 ab 1\nq1 0 ba 0\n")
    run.write_text(run_text)
    monkeypatch.setattr(ByteStrings, "keys", weak_keys("constant"))
    with pytest.raises(InputError) as caught:
        batch_from_trec(read_run(run), read_qrels(qrels, TrecScale()))
    doc = run_text.split("\n")[line - 1].split()[2]
    assert str(caught.value) == f"{run}:{line}: document {doc} retrieved twice for query q1"
