"""Join a TREC run with its qrels into a :class:`RankedBatch`, ordered as trec_eval orders it.

* queries: those in both the run and the qrels, in ascending query-id order (byte order); with
  ``complete`` (trec_eval ``-c``) every judged query, an absent one scoring as an empty list;
* documents within a query: score descending, then document id descending (trec_eval's tie-break; the
  rank field of the run is ignored);
* unjudged documents have gain 0 and are not relevant; the NDCG ideal is built from every judged
  document of the query.

No string is sorted unless scores tie (or a hash collides). The join sorts 64-bit keys, (query, hash
of the document id), of the qrels rows followed by the run rows; neighbours with equal keys are a
judgment (qrels row, run row) or a repeated document (two qrels rows or two run rows, an error). Every
such pair is compared byte for byte; if a hash collision paired two different ids, the join is redone
by sorting the strings (:func:`_match_by_strings`). The run rows are then ordered by one sort of
(list, score descending) keys, the score's low bits cut to make room for the list; rows whose keys tie
are put in exact order (score descending, then document id descending) among themselves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from monitor.core.ranked_batch import RankedBatch
from monitor.offline.byte_strings import BLOCK, ByteStrings, IndexArray, blocks, equal
from monitor.offline.trec import Qrels, Run, repeated_document

IntArray = npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_LOW_63 = np.int64((1 << 63) - 1)


def byte_strings(chunks: list[pa.Array]) -> ByteStrings:
    """The strings of Arrow ``string`` arrays, back to back (their bytes copied once into one buffer)."""
    parts = []
    for chunk in chunks:
        _, offsets, data = chunk.buffers()
        starts = np.frombuffer(offsets, dtype=np.int32, count=len(chunk) + 1, offset=chunk.offset * 4)
        parts.append((starts, np.frombuffer(data, dtype=np.uint8) if data is not None and data.size
                      else np.zeros(int(starts[-1]), dtype=np.uint8)))
    return ByteStrings.from_parts(parts)


def _bits(count: int) -> int:
    """Bits that hold 0 .. count - 1 (at least one)."""
    return max(1, (count - 1).bit_length())


def _tied_neighbours(keys: WordArray, order: IntArray) -> BoolArray:
    """For each i < n - 1, whether ``keys[order[i]] == keys[order[i + 1]]`` (gathered a block at a time)."""
    tied = np.zeros(max(order.size - 1, 0), dtype=bool)
    for rows in blocks(tied.size):
        ordered = keys[order[rows.start:rows.stop + 1]]
        np.equal(ordered[1:], ordered[:-1], out=tied[rows])
    return tied


def _same(qrels: ByteStrings, run: ByteStrings, first: IntArray, second: IntArray) -> bool:
    """Whether every pair (first[i], second[i]) of rows (qrels rows, then run rows) has equal strings."""
    n_qrels = len(qrels)
    both_qrels, both_run = second < n_qrels, first >= n_qrels
    mixed = ~both_qrels & ~both_run
    return bool(equal(qrels, first[both_qrels], qrels, second[both_qrels]).all()
                and equal(qrels, first[mixed], run, second[mixed] - n_qrels).all()
                and equal(run, first[both_run] - n_qrels, run, second[both_run] - n_qrels).all())


def _match_by_hash(qrels: ByteStrings, run: ByteStrings, qrels_labels: IndexArray, run_labels: IndexArray,
                   n_labels: int) -> tuple[IntArray, IntArray] | None:
    """Neighbouring rows with the same (label, document id), or None if a hash collision paired two ids.

    Rows are numbered qrels first, then run; in each pair the first row comes first in that numbering.
    """
    keys = np.empty(len(qrels) + len(run), dtype=np.uint64)
    qrels.keys(qrels_labels, _bits(n_labels), out=keys[:len(qrels)])
    run.keys(run_labels, _bits(n_labels), out=keys[len(qrels):])
    order = np.argsort(keys, kind="stable")
    same = np.flatnonzero(_tied_neighbours(keys, order))
    del keys
    first, second = order[same], order[same + 1]
    return (first, second) if _same(qrels, run, first, second) else None


def _match_by_strings(qrels: Qrels, run: Run, labels: IntArray) -> tuple[IntArray, IntArray]:
    """The same pairs as :func:`_match_by_hash`, by one stable sort of (label, document id) strings."""
    import pyarrow.compute as pc  # here only: the import costs 30 ms, and hash collisions are rare

    docno = pa.chunked_array(qrels.docno.chunks + run.docno.chunks, type=pa.string()).combine_chunks()
    order = pc.sort_indices(pa.table({"q": labels, "d": docno}),
                            sort_keys=[("q", "ascending"), ("d", "ascending")])
    ordered = docno.take(order)
    rows = np.asarray(order).view(np.int64)
    same = np.flatnonzero(np.asarray(pc.equal(ordered[1:], ordered[:-1]), dtype=bool)
                          & (labels[rows[1:]] == labels[rows[:-1]]))
    return rows[same], rows[same + 1]


def _match(qrels: Qrels, run: Run, strings: tuple[ByteStrings, ByteStrings],
           labels: tuple[IndexArray, IndexArray], n_labels: int) -> IndexArray:
    """The qrels row judging each run row, or -1; raises for a document judged or retrieved twice."""
    n_qrels = len(qrels.docno)
    pairs = _match_by_hash(*strings, *labels, n_labels)
    if pairs is None:
        pairs = _match_by_strings(qrels, run, np.concatenate(labels).astype(np.int64))
    first, second = pairs
    if (second < n_qrels).any():  # qrels rows come first: a qrels pair is reported before a run pair
        raise repeated_document(qrels.path or Path("qrels"), "judged")
    if (first >= n_qrels).any():
        raise repeated_document(run.path or Path("run"), "retrieved")
    match: IndexArray = (np.full(len(run.docno), -1, dtype=np.int32) if n_qrels < 2**31
                         else np.full(len(run.docno), -1, dtype=np.int64))
    match[second - n_qrels] = first
    return match


def _descending(scores: FloatArray, out: WordArray) -> None:
    """Unsigned keys that sort as the scores descending (-0.0 as 0.0), into ``out``."""
    np.add(scores, 0.0, out=out.view(np.float64))  # + 0.0 turns -0.0 into 0.0
    flip = out.view(np.int64) >> np.int64(63)  # -1 where negative, else 0
    np.invert(flip, out=flip)
    flip &= _LOW_63  # positive: flip all bits but the sign; negative: none
    out ^= flip.view(np.uint64)


def trec_order(lists: IndexArray, n_lists: int, scores: FloatArray, strings: ByteStrings,
               rows: IntArray | None = None, tie_chunk: int = BLOCK) -> IntArray:
    """``rows`` (default: all) ordered by list, then score descending, then document id descending.

    ``lists[i]`` is the list of row i (0 .. n_lists - 1) and ``strings`` holds its document id; tied
    rows are put in order about ``tie_chunk`` at a time.
    """
    n = lists.size if rows is None else rows.size
    shift, top = np.uint64(_bits(n_lists)), np.uint64(64 - _bits(n_lists))
    keys = np.empty(n, dtype=np.uint64)
    for part in blocks(n):
        picked = part if rows is None else rows[part]
        block = keys[part]
        _descending(scores[picked], block)
        block >>= shift
        high = lists[picked].astype(np.uint64)
        high <<= top
        block |= high
    order = np.argsort(keys, kind="stable")
    tied = _tied_neighbours(keys, order)
    del keys
    if tied.any():  # equal keys: equal scores (or scores equal but for the cut bits), put in exact order
        _order_ties(order, tied, scores, strings, rows, tie_chunk)
    ordered_rows: IntArray = order if rows is None else rows[order]
    return ordered_rows


def _order_ties(order: IntArray, tied: BoolArray, scores: FloatArray, strings: ByteStrings,
                rows: IntArray | None, chunk: int) -> None:
    """Put each run of slots of ``order`` whose keys tie (``tied[i]``: slots i and i + 1 do) in exact
    order: score descending, then document id descending. A chunk of whole runs at a time, so that the
    temporary arrays stay small even when every score ties."""
    in_run = np.zeros(order.size, dtype=bool)
    in_run[:-1] = tied
    in_run[1:] |= tied
    at = np.flatnonzero(in_run)  # the tied slots
    del in_run
    starts = np.flatnonzero(np.r_[True, ~((at[1:] == at[:-1] + 1) & tied[at[:-1]])])  # each run's first
    low = 0
    while low < at.size:
        following = int(np.searchsorted(starts, low + chunk))  # the first run that starts a chunk later
        high = int(starts[following]) if following < starts.size else at.size
        slots = at[low:high]
        first = np.zeros(high - low, dtype=bool)
        first[starts[(starts >= low) & (starts < high)] - low] = True
        group = np.cumsum(first) - 1
        low = high
        held = order[slots]  # what the tied slots hold; re-ordered within each run below
        tied_rows = held if rows is None else rows[held]
        tied_scores = scores[tied_rows] + 0.0
        if (tied_scores[1:] != tied_scores[:-1])[group[1:] == group[:-1]].any():  # the cut bits differ
            by_score = np.lexsort((-tied_scores, group))
            held, tied_rows, tied_scores = held[by_score], tied_rows[by_score], tied_scores[by_score]
            group = np.cumsum(np.r_[0, (group[1:] != group[:-1]) | (tied_scores[1:] != tied_scores[:-1])])
        order[slots] = held[strings.descending_within(tied_rows, group)]


def _positions(names: list[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(names)}


def _ideal_pools(lists: IntArray, grade: IndexArray, gains: FloatArray, relevant: FloatArray,
                 n: int) -> tuple[IntArray, FloatArray, IntArray]:
    """(offsets, gains sorted descending within each list, relevant count) of the judged documents.

    ``lists`` is each qrels row's list (-1 for none); a count per (list, distinct gain) then one repeat.
    """
    values, gain_rank = np.unique(-gains, return_inverse=True)  # rank 0: the largest gain
    kept = lists >= 0
    n_values = max(values.size, 1)
    counts = np.bincount(lists[kept].astype(np.int64) * n_values + gain_rank[grade[kept]],
                         minlength=n * n_values).reshape(n, n_values)
    offsets = np.r_[0, np.cumsum(counts.sum(axis=1))].astype(np.int64)
    pool = np.repeat(np.tile(-values, n), counts.ravel())
    n_relevant = np.bincount(lists[kept], weights=relevant[grade[kept]], minlength=n).astype(np.int64)
    return offsets, pool, n_relevant


def batch_from_trec(run: Run, qrels: Qrels, complete: bool = False) -> RankedBatch:
    # The evaluated queries, sorted by id (code point order is UTF-8 byte order): judged ones (and,
    # unless complete, retrieved ones).
    qrels_names: list[str] = qrels.queries.to_pylist()
    run_names: list[str] = run.queries.to_pylist()
    judged = sorted(qrels_names)
    judged_at = _positions(judged)
    retrieved = np.bincount(run.query_index, minlength=len(run_names))  # rows of each run query
    run_to_judged = np.array([judged_at.get(name, -1) for name in run_names], dtype=np.int64)
    if complete:
        kept = np.arange(len(judged), dtype=np.int64)
    else:
        present = np.zeros(len(judged), dtype=bool)
        used = run_to_judged[retrieved > 0]
        present[used[used >= 0]] = True
        kept = np.flatnonzero(present)
    slot = np.full(len(judged) + 1, -1, dtype=np.int64)  # judged index (or -1) -> output list
    slot[kept] = np.arange(kept.size, dtype=np.int64)
    n = int(kept.size)
    run_slot = slot[run_to_judged]  # output list of each run query, or -1
    sizes = np.zeros(n, dtype=np.int64)
    sizes[run_slot[run_slot >= 0]] = retrieved[run_slot >= 0]

    # Join labels: a run query by its index in the run, a query only in the qrels after those; so rows
    # come in label order in files that list queries in the same order (the stable sort likes that).
    run_at = _positions(run_names)
    qrels_label = np.array([run_at.get(name, len(run_names) + i) for i, name in enumerate(qrels_names)],
                           dtype=np.int32)
    strings = byte_strings(qrels.docno.chunks), byte_strings(run.docno.chunks)
    match = _match(qrels, run, strings, (qrels_label[qrels.query_index], run.query_index),
                   len(run_names) + len(qrels_names))

    row_list = run_slot.astype(np.int32)[run.query_index]
    rows = trec_order(row_list, n, run.scores, strings[1],
                      None if (run_slot >= 0).all() else np.flatnonzero(row_list >= 0))
    del row_list, strings

    # Each row's grade (an index into the qrels' grade tables; one past their end for unjudged rows).
    n_grades = qrels.grade_gains.size
    grade = np.append(qrels.grade, np.int32(n_grades)).astype(np.int32, copy=False)[match[rows]]
    del match

    def judged_values(table: FloatArray) -> FloatArray:
        return np.append(table, 0.0)[grade]

    gains = judged_values(qrels.grade_gains)
    pool_offsets, pool_gains, n_relevant = _ideal_pools(
        slot[np.array([judged_at[name] for name in qrels_names], dtype=np.int64)][qrels.query_index],
        qrels.grade, qrels.grade_gains, qrels.grade_relevant, n)
    return RankedBatch(
        keys=[judged[i] for i in kept.tolist()],
        offsets=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        gains=gains,
        levels=gains if np.array_equal(qrels.grade_levels, qrels.grade_gains) else judged_values(
            qrels.grade_levels),  # the same array when gains are the levels (the trec scale)
        relevant=judged_values(qrels.grade_relevant),
        judged=grade < n_grades,
        scores=run.scores[rows],
        pool_offsets=pool_offsets,
        pool_gains=pool_gains,
        n_relevant=n_relevant,
        max_level=qrels.max_level,
    )
