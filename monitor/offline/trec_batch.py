"""Join a TREC run with its qrels into a :class:`RankedBatch`, ordered as trec_eval orders it.

* queries: those in both the run and the qrels, in ascending query-id order; with ``complete`` (trec_eval
  ``-c``) every judged query, an absent one scoring as an empty list;
* documents within a query: score descending, then document id descending (trec_eval's tie-break; the
  rank field of the run is ignored);
* unjudged documents have gain 0 and are not relevant; the NDCG ideal is built from every judged
  document of the query.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from monitor.core.batch import RankedBatch
from monitor.offline.trec import Qrels, Run

IntArray = npt.NDArray[np.int64]


def _indices(array: pa.Array) -> IntArray:
    return np.asarray(pc.fill_null(array, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def batch_from_trec(run: Run, qrels: Qrels, complete: bool = False) -> RankedBatch:
    # The evaluated queries, sorted by id: judged ones (and, unless complete, retrieved ones).
    judged = qrels.queries.take(pc.array_sort_indices(qrels.queries))
    run_to_judged = _indices(pc.index_in(run.queries, value_set=judged))
    if complete:
        kept = np.arange(len(judged), dtype=np.int64)
    else:
        present = np.zeros(len(judged), dtype=bool)
        used = run_to_judged[np.unique(run.query_index)] if run.query_index.size else run_to_judged[:0]
        present[used[used >= 0]] = True
        kept = np.flatnonzero(present)
    slot = np.full(len(judged) + 1, -1, dtype=np.int64)  # judged index (or -1) -> output list
    slot[kept] = np.arange(kept.size, dtype=np.int64)
    n = int(kept.size)

    # Join every run row with its judgment on "query \x1f docno" (in file order).
    qrels_to_judged = _indices(pc.index_in(qrels.queries, value_set=judged))
    pool_list = slot[qrels_to_judged[qrels.query_index]]
    qrels_keys = pc.binary_join_element_wise(qrels.queries.take(pa.array(qrels.query_index)), qrels.docno,
                                             "\x1f")
    run_keys = pc.binary_join_element_wise(run.qid, run.docno, "\x1f")
    file_match = _indices(pc.index_in(run_keys, value_set=qrels_keys))

    # Run rows of evaluated queries, ordered (list, score desc, docno desc).
    row_list = slot[run_to_judged[run.query_index]] if run.query_index.size else run.query_index
    rows = np.flatnonzero(row_list >= 0)
    whole = rows.size == row_list.size
    table = pa.table({"q": row_list[rows], "s": run.scores[rows],
                      "d": run.docno if whole else run.docno.take(pa.array(rows))})
    order = np.asarray(pc.sort_indices(table, sort_keys=[("q", "ascending"), ("s", "descending"),
                                                         ("d", "descending")]))
    rows = rows[order]
    lists = row_list[rows]
    match = file_match[rows]
    hit = match >= 0
    safe = np.where(hit, match, 0)

    def judged_values(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.where(hit, values[safe] if values.size else 0.0, 0.0).astype(np.float64)

    in_pool = pool_list >= 0
    pool_of = pool_list[in_pool]
    pool_gains = qrels.gains[in_pool]
    pool_order = np.lexsort((-pool_gains, pool_of))
    return RankedBatch(
        keys=judged.take(pa.array(kept)).to_pylist() if n else [],
        offsets=np.r_[0, np.cumsum(np.bincount(lists, minlength=n))].astype(np.int64),
        gains=judged_values(qrels.gains),
        levels=judged_values(qrels.levels),
        relevant=judged_values(qrels.relevant),
        judged=hit,
        scores=run.scores[rows],
        pool_offsets=np.r_[0, np.cumsum(np.bincount(pool_of, minlength=n))].astype(np.int64),
        pool_gains=pool_gains[pool_order],
        n_relevant=np.bincount(pool_of, weights=qrels.relevant[in_pool], minlength=n).astype(np.int64),
        max_level=qrels.max_level,
    )
