"""Join a TREC run with its qrels into a :class:`RankedBatch`, ordered as trec_eval orders it.

* queries: those in both the run and the qrels, in ascending query-id order (byte order); with
  ``complete`` (trec_eval ``-c``) every judged query, an absent one scoring as an empty list;
* documents within a query: score descending, then document id descending (trec_eval's tie-break; the
  rank field of the run is ignored);
* unjudged documents have gain 0 and are not relevant; the NDCG ideal is built from every judged
  document of the query.

No string is sorted unless scores tie. The join sorts 64-bit keys, (query, hash of the document id), of
the qrels rows followed by the run rows; neighbours with equal keys are a judgment (qrels row, run row)
or a repeated document (two qrels rows or two run rows, an error). Every such pair is compared byte for
byte; if a hash collision paired two different ids, the join is redone by sorting the strings
(:func:`_match_by_strings`). The run rows are then ordered by one sort of (list, score descending)
keys, the score's low bits cut to make room for the list; rows whose keys tie are put in exact order
(score descending, then document id descending) among themselves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from monitor.core.batch import RankedBatch
from monitor.offline.byte_strings import ByteStrings
from monitor.offline.trec import Qrels, Run, repeated_document

IntArray = npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]

_LOW_63 = np.uint64((1 << 63) - 1)


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


def _pairs_with_equal_keys(keys: WordArray) -> tuple[IntArray, IntArray]:
    """(i, j) for every pair of neighbours in a stable sort of ``keys`` whose keys are equal."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    return order[same], order[same + 1]


def _match_by_hash(strings: ByteStrings, labels: IntArray, n_labels: int) -> tuple[IntArray, IntArray] | None:
    """Neighbouring rows with the same (label, document id), or None if a hash collision paired two ids."""
    shift = np.uint64(_bits(n_labels))
    keys = strings.hashes()
    keys >>= shift
    keys |= labels.astype(np.uint64) << (np.uint64(64) - shift)
    first, second = _pairs_with_equal_keys(keys)
    del keys
    if not strings.equal(first, second).all():
        return None
    return first, second


def _match_by_strings(qrels: Qrels, run: Run, labels: IntArray) -> tuple[IntArray, IntArray]:
    """The same pairs as :func:`_match_by_hash`, by one stable sort of (label, document id) strings."""
    import pyarrow.compute as pc  # only here: the import costs as much as the rest of a small join

    docno = pa.chunked_array(qrels.docno.chunks + run.docno.chunks, type=pa.string()).combine_chunks()
    order = pc.sort_indices(pa.table({"q": labels, "d": docno}),
                            sort_keys=[("q", "ascending"), ("d", "ascending")])
    ordered = docno.take(order)
    rows = np.asarray(order).view(np.int64)
    same = np.flatnonzero(np.asarray(pc.equal(ordered[1:], ordered[:-1]), dtype=bool)
                          & (labels[rows[1:]] == labels[rows[:-1]]))
    return rows[same], rows[same + 1]


def _match(qrels: Qrels, run: Run, strings: ByteStrings, labels: IntArray, n_labels: int) -> IntArray:
    """The qrels row judging each run row, or -1; raises for a document judged or retrieved twice."""
    n_qrels = len(qrels.docno)
    pairs = _match_by_hash(strings, labels, n_labels)
    first, second = pairs if pairs is not None else _match_by_strings(qrels, run, labels)
    if (second < n_qrels).any():  # qrels rows come first: a qrels pair is reported before a run pair
        raise repeated_document(qrels.path or Path("qrels"), "judged")
    if (first >= n_qrels).any():
        raise repeated_document(run.path or Path("run"), "retrieved")
    match = np.full(len(run.docno), -1, dtype=np.int64)
    match[second - n_qrels] = first
    return match


def _descending(scores: FloatArray) -> WordArray:
    """Unsigned keys that sort as the scores descending (-0.0 as 0.0)."""
    bits = (scores + 0.0).view(np.uint64)  # + 0.0 turns -0.0 into 0.0
    negative = (bits.view(np.int64) >> np.int64(63)).view(np.uint64)  # all ones where negative
    keys: WordArray = bits ^ (~negative & _LOW_63)
    return keys


def trec_order(lists: IntArray, n_lists: int, scores: FloatArray, strings: ByteStrings,
               rows: IntArray | None = None) -> IntArray:
    """``rows`` (default: all) ordered by list, then score descending, then document id descending.

    ``lists[i]`` is the list of row i (0 .. n_lists - 1) and ``strings`` holds its document id.
    """
    rows = np.arange(lists.size, dtype=np.int64) if rows is None else rows
    shift = np.uint64(_bits(n_lists))
    keys = _descending(scores[rows])
    keys >>= shift
    keys |= lists[rows].astype(np.uint64) << (np.uint64(64) - shift)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    tied = ordered[1:] == ordered[:-1]
    del keys
    if tied.any():  # equal keys: equal scores (or scores equal but for the cut bits), put in exact order
        in_group = np.zeros(order.size, dtype=bool)
        in_group[:-1] = tied
        in_group[1:] |= tied
        at = np.flatnonzero(in_group)
        group = np.cumsum(np.r_[True, ordered[at[1:]] != ordered[at[:-1]]])
        tied_rows = rows[order[at]]
        descending = [~key for key in strings.order_keys(tied_rows)]
        order[at] = order[at][np.lexsort((*descending, -(scores[tied_rows] + 0.0), group))]
    ordered_rows: IntArray = rows[order]
    return ordered_rows


def _positions(names: list[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(names)}


def batch_from_trec(run: Run, qrels: Qrels, complete: bool = False) -> RankedBatch:
    # The evaluated queries, sorted by id (code point order is UTF-8 byte order): judged ones (and,
    # unless complete, retrieved ones).
    qrels_names: list[str] = qrels.queries.to_pylist()
    run_names: list[str] = run.queries.to_pylist()
    judged = sorted(qrels_names)
    judged_at = _positions(judged)
    run_to_judged = np.array([judged_at.get(name, -1) for name in run_names], dtype=np.int64)
    if complete:
        kept = np.arange(len(judged), dtype=np.int64)
    else:
        present = np.zeros(len(judged), dtype=bool)
        used = run_to_judged[np.bincount(run.query_index, minlength=len(run_names)) > 0]
        present[used[used >= 0]] = True
        kept = np.flatnonzero(present)
    slot = np.full(len(judged) + 1, -1, dtype=np.int64)  # judged index (or -1) -> output list
    slot[kept] = np.arange(kept.size, dtype=np.int64)
    n = int(kept.size)
    qrels_to_judged = np.array([judged_at[name] for name in qrels_names], dtype=np.int64)

    # Join labels: a run query by its index in the run, a query only in the qrels after those; so rows
    # come in label order in files that list queries in the same order (the stable sort likes that).
    run_at = _positions(run_names)
    qrels_label = np.array([run_at.get(name, len(run_names) + i) for i, name in enumerate(qrels_names)],
                           dtype=np.int64)
    labels = np.concatenate([qrels_label[qrels.query_index], run.query_index])
    strings = byte_strings(qrels.docno.chunks + run.docno.chunks)
    n_qrels = len(qrels.docno)
    match = _match(qrels, run, strings, labels, len(run_names) + len(qrels_names))
    del labels

    row_list = slot[run_to_judged][run.query_index]
    evaluated = row_list >= 0
    rows = trec_order(row_list, n, run.scores, strings.part(n_qrels),
                      None if evaluated.all() else np.flatnonzero(evaluated))
    sizes = np.bincount(row_list[evaluated], minlength=n)
    del row_list, evaluated, strings
    match = match[rows]

    def judged_values(values: FloatArray) -> FloatArray:
        return np.append(values, 0.0)[match]  # -1 (unjudged) picks the appended 0

    pool_of = slot[qrels_to_judged][qrels.query_index]
    in_pool = pool_of >= 0
    pool_of = pool_of[in_pool]
    pool_gains = qrels.gains[in_pool]
    pool_order = np.lexsort((-pool_gains, pool_of))
    return RankedBatch(
        keys=[judged[i] for i in kept.tolist()],
        offsets=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        gains=judged_values(qrels.gains),
        levels=judged_values(qrels.levels),
        relevant=judged_values(qrels.relevant),
        judged=match >= 0,
        scores=run.scores[rows],
        pool_offsets=np.r_[0, np.cumsum(np.bincount(pool_of, minlength=n))].astype(np.int64),
        pool_gains=pool_gains[pool_order],
        n_relevant=np.bincount(pool_of, weights=qrels.relevant[in_pool], minlength=n).astype(np.int64),
        max_level=qrels.max_level,
    )
