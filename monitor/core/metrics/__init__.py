"""Per-list metrics as pure functions over arrays given in rank order (rank 1 first).

Each module holds one family: gain-based (CG, DCG, NDCG), binary (P@k, R@k, AP, RR), pairwise (PNR,
Kendall tau distance), AUC, and cascade models (RBP, ERR). The measures (``monitor/core/measures/``)
call them on one list, and compute the rank-based ones for many lists at once over the segmented arrays
of a :class:`monitor.core.ranked_batch.RankedBatch` (the offline evaluator's fast path), tested against
these definitions.
"""

from monitor.core.metrics.auc import auc
from monitor.core.metrics.binary import (
    average_precision,
    precision,
    recall,
    reciprocal_rank,
    seed_average_precision,
)
from monitor.core.metrics.cascade import err, rbp
from monitor.core.metrics.gain import cg, dcg, discounts, ideal_dcg, ndcg
from monitor.core.metrics.pairs import PairCounts, kendall_tau_distance, pair_counts

__all__ = [
    "PairCounts",
    "auc",
    "average_precision",
    "cg",
    "dcg",
    "discounts",
    "err",
    "ideal_dcg",
    "kendall_tau_distance",
    "ndcg",
    "pair_counts",
    "precision",
    "rbp",
    "recall",
    "reciprocal_rank",
    "seed_average_precision",
]
