"""The simulated canary regression: how often the canary serves its broken list, and which list that is.

The same mechanism degrades the newly deployed ranker of a deploy run (``SimConfig.deploy_at``): read
"canary" as "the new ranker" below. ``SimConfig.regression_kind`` picks the kind.

**"flip"** (the default). For a canary session in a regressed bucket, let ``h`` be DCG@k of the healthy
canary list and ``b`` that of the broken one (relevance signal flipped,
:class:`~monitor.sim.rankers.Ranker`), both from latent grades with the seed gains 1 / 0.7 / 0.3 / 0. The
canary serves the broken list with probability

    p = min(1, (r × h + debt) / (h − b))

so the session's expected DCG@k is ``h − p (h − b) = (1 − r) h``: over many sessions the canary's mean
DCG@k is ``r`` (relative) below the healthy mean, which is the control's. Whatever a session cannot give
(``h ≤ b``, or p capped at 1) is carried as ``debt`` to the next sessions of the bucket, so the expectation
holds overall. Most sessions are untouched; a few are badly hurt, as with a real partial breakage.

**"irrelevant"**: a ranker that returns nothing relevant. With probability ``r`` (1: every session) a
canary session in a regressed bucket shows only its query's documents of latent grade 0 (无), in the
order of the canary's own noisy scores, as many as the pool has up to the bucket's ``top_n``
(:func:`only_irrelevant`); annotators grade them truthfully, so such a session scores DCG@k 0 and has no
pair of different grades. An impression needs at least one result (docs/events.md), so a query whose pool
has no grade-0 document shows its lowest-graded documents instead (a DCG above 0: rare with the default
grade mixes, and visible in the ground truth's levels).

>>> from monitor.sim.rankers import Ranking
>>> full = Ranking(np.array([2, 0, 3, 1]), np.array([0.9, 0.8, 0.4, 0.1]))
>>> shown = only_irrelevant(full, np.array([1, 0, 3, 0]), top_n=3)
>>> shown.indices.tolist(), shown.scores.tolist()
([3, 1], [0.4, 0.1])
>>> only_irrelevant(full, np.array([2, 1, 3, 1]), top_n=1).indices.tolist()
[3]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.sim.rankers import Ranking
from monitor.sim.relevance import LEVEL_GAINS

_GAINS = np.asarray(LEVEL_GAINS, dtype=np.float64)
_DISCOUNTS = 1.0 / np.log2(np.arange(2, 1002, dtype=np.float64))


def dcg_of_levels(levels: npt.NDArray[np.int64], k: int) -> float:
    """DCG@k (linear gain, log2 discount) of levels in shown order, with the four-level scale's gains."""
    top = levels[:k]
    return float(np.dot(_GAINS[top], _DISCOUNTS[: top.size]))


@dataclass
class RegressionBudget:
    """The expected DCG loss still owed in one bucket."""

    regression: float
    debt: float = 0.0

    def probability(self, healthy: float, broken: float) -> float:
        """Probability of serving the broken list for one session, and book what it leaves owed."""
        target = self.regression * healthy + self.debt
        gap = healthy - broken
        if target <= 0.0 or gap <= 0.0:
            self.debt = max(target, 0.0)
            return 0.0
        p = min(1.0, target / gap)
        self.debt = target - p * gap
        return p


def only_irrelevant(full: Ranking, levels: npt.NDArray[np.int64], top_n: int) -> Ranking:
    """The list of a ranker returning nothing relevant: of ``full`` (the whole pool ranked by the ranker's
    scores; ``levels`` per pool index), only the documents at the pool's lowest level (0, 无, when it has
    any), in ``full``'s order, at most ``top_n`` of them; never empty for a non-empty pool."""
    lowest = levels.min()
    keep = np.flatnonzero(levels[full.indices] == lowest)[:top_n]
    return Ranking(full.indices[keep], full.scores[keep])
