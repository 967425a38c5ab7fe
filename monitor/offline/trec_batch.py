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
import pyarrow as pa
import pyarrow.compute as pc

from monitor.core.batch import RankedBatch
from monitor.offline.trec import Qrels, Run


def _indices(array: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def batch_from_trec(run: Run, qrels: Qrels, complete: bool = False) -> RankedBatch:
    judged_queries = pc.unique(qrels.qid)
    judged_queries = judged_queries.take(pc.array_sort_indices(judged_queries))
    run_query = _indices(pc.index_in(run.qid, value_set=judged_queries))
    if complete:
        kept = np.arange(len(judged_queries), dtype=np.int64)
    else:
        kept = np.unique(run_query[run_query >= 0])
    remap = np.full(len(judged_queries), -1, dtype=np.int64)
    remap[kept] = np.arange(kept.size, dtype=np.int64)
    n = int(kept.size)

    in_run = run_query >= 0
    rows = pa.table({
        "q": pa.array(remap[run_query[in_run]]),
        "score": pa.array(run.scores[in_run]),
        "docno": run.docno.filter(pa.array(in_run)),
        "row": pa.array(np.flatnonzero(in_run)),
    }).sort_by([("q", "ascending"), ("score", "descending"), ("docno", "descending")])
    query = np.asarray(rows["q"].to_numpy(), dtype=np.int64)
    order = np.asarray(rows["row"].to_numpy(), dtype=np.int64)

    qrels_keys = pc.binary_join_element_wise(qrels.qid, qrels.docno, "\x1f")
    run_keys = pc.binary_join_element_wise(
        run.qid.take(pa.array(order)), rows["docno"].combine_chunks(), "\x1f")
    match = _indices(pc.index_in(run_keys, value_set=qrels_keys))
    hit = match >= 0
    safe = np.where(hit, match, 0)

    def judged_values(values: np.ndarray) -> np.ndarray:
        return np.where(hit, values[safe] if values.size else 0.0, 0.0).astype(np.float64)

    qrels_query = remap[_indices(pc.index_in(qrels.qid, value_set=judged_queries))]
    in_pool = qrels_query >= 0
    pool_query = qrels_query[in_pool]
    pool_gains = qrels.gains[in_pool]
    pool_order = np.lexsort((-pool_gains, pool_query))

    sizes = np.bincount(query, minlength=n)
    pool_sizes = np.bincount(pool_query, minlength=n)
    keys = judged_queries.take(pa.array(kept)).to_pylist() if n else []
    return RankedBatch(
        keys=keys,
        offsets=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        gains=judged_values(qrels.gains),
        levels=judged_values(qrels.levels),
        relevant=judged_values(qrels.relevant),
        judged=hit,
        scores=np.asarray(rows["score"].to_numpy(), dtype=np.float64),
        pool_offsets=np.r_[0, np.cumsum(pool_sizes)].astype(np.int64),
        pool_gains=pool_gains[pool_order],
        n_relevant=np.bincount(pool_query, weights=qrels.relevant[in_pool], minlength=n).astype(np.int64),
        max_level=qrels.max_level,
    )
