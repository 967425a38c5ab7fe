"""Join a TREC run with its qrels into a :class:`RankedBatch`, ordered as trec_eval orders it.

* queries: those in both the run and the qrels, in ascending query-id order; with ``complete`` (trec_eval
  ``-c``) every judged query, an absent one scoring as an empty list;
* documents within a query: score descending, then document id descending (trec_eval's tie-break; the
  rank field of the run is ignored);
* unjudged documents have gain 0 and are not relevant; the NDCG ideal is built from every judged
  document of the query.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from monitor.core.batch import RankedBatch
from monitor.offline.trec import Qrels, Run, repeated_document

IntArray = npt.NDArray[np.int64]


def _indices(array: pa.Array) -> IntArray:
    return np.asarray(pc.fill_null(array, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _equal_neighbours(strings: pa.Array, order: pa.Array, chunk: int = 1 << 18) -> IntArray:
    """Positions i where strings[order[i]] == strings[order[i + 1]], taking a chunk at a time."""
    found = []
    for start in range(0, max(len(order) - 1, 0), chunk):
        ordered = strings.take(order[start:start + chunk + 1])
        found.append(start + np.flatnonzero(np.asarray(pc.equal(ordered[1:], ordered[:-1]))))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _match_rows(run: Run, qrels: Qrels, qrels_query: npt.NDArray[np.int32],
                run_query: npt.NDArray[np.int32]) -> tuple[IntArray, IntArray]:
    """(qrels row of each run row or -1, run rows ordered by query then document id descending).

    One stable sort of the qrels rows followed by the run rows on (query, document id): a run row right
    after a qrels row with the same key is judged by it; two qrels rows or two run rows in a row with the
    same key are a document judged or retrieved twice for one query, an error.
    """
    n_qrels, n_run = len(qrels.docno), len(run.docno)
    query = np.concatenate([qrels_query, run_query])
    docno = pa.chunked_array(qrels.docno.chunks + run.docno.chunks, type=pa.string()).combine_chunks()
    sorted_rows = pc.sort_indices(pa.table({"q": query, "d": docno}),
                                  sort_keys=[("q", "ascending"), ("d", "ascending")])
    order = np.asarray(sorted_rows).view(np.int64)
    match = np.full(n_run, -1, dtype=np.int64)
    same = _equal_neighbours(docno, sorted_rows)
    del docno
    first, second = order[same], order[same + 1]
    keep = query[first] == query[second]
    first, second = first[keep], second[keep]
    if (second < n_qrels).any():
        raise repeated_document(qrels.path or Path("qrels"), "judged")
    if (first >= n_qrels).any():
        raise repeated_document(run.path or Path("run"), "retrieved")
    match[second - n_qrels] = first
    rows_by_doc = order[order >= n_qrels] - n_qrels
    del order, sorted_rows
    pa.default_memory_pool().release_unused()  # the sort's and the take's buffers, before the next peak
    return match, rows_by_doc[::-1]


def _by_list_then_score(lists: npt.NDArray[np.int32], scores: npt.NDArray[np.float64]) -> IntArray:
    """Stable order by list ascending, then score descending."""
    order = pc.sort_indices(pa.table({"q": lists, "s": scores}),
                            sort_keys=[("q", "ascending"), ("s", "descending")])
    return np.asarray(order).view(np.int64)


def batch_from_trec(run: Run, qrels: Qrels, complete: bool = False) -> RankedBatch:
    # The evaluated queries, sorted by id: judged ones (and, unless complete, retrieved ones).
    judged = qrels.queries.take(pc.array_sort_indices(qrels.queries))
    run_to_judged = _indices(pc.index_in(run.queries, value_set=judged))
    if complete:
        kept = np.arange(len(judged), dtype=np.int64)
    else:
        present = np.zeros(len(judged), dtype=bool)
        used = run_to_judged[np.bincount(run.query_index, minlength=len(run.queries)) > 0]
        present[used[used >= 0]] = True
        kept = np.flatnonzero(present)
    slot = np.full(len(judged) + 1, -1, dtype=np.int64)  # judged index (or -1) -> output list
    slot[kept] = np.arange(kept.size, dtype=np.int64)
    n = int(kept.size)

    # Every row's query as one integer: judged queries by their index in `judged`, run-only queries after
    # (lookups per distinct query, then one gather per row; int32 halves what the sorts move).
    qrels_query = _indices(pc.index_in(qrels.queries, value_set=judged)).astype(np.int32)[qrels.query_index]
    run_only = len(judged) + np.arange(len(run.queries), dtype=np.int64)
    run_query = np.where(run_to_judged >= 0, run_to_judged, run_only).astype(np.int32)[run.query_index]
    match, rows = _match_rows(run, qrels, qrels_query, run_query)
    del run_query

    # Run rows of evaluated queries, ordered (list, score desc, docno desc): a stable sort on
    # (list, score desc) of rows already in document id descending order.
    row_list = slot.astype(np.int32)[run_to_judged][run.query_index]
    rows = rows[row_list[rows] >= 0]
    rows = rows[_by_list_then_score(row_list[rows], run.scores[rows])]
    sizes = np.bincount(row_list[rows], minlength=n)
    del row_list
    match = match[rows]

    def judged_values(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.append(values, 0.0)[match]  # -1 (unjudged) picks the appended 0

    pool_of = slot[qrels_query]
    in_pool = pool_of >= 0
    pool_of = pool_of[in_pool]
    pool_gains = qrels.gains[in_pool]
    pool_order = np.lexsort((-pool_gains, pool_of))
    return RankedBatch(
        keys=judged.take(pa.array(kept)).to_pylist() if n else [],
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
