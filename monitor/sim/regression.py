"""The simulated canary regression: how often the canary serves its broken list.

The same mechanism degrades the newly deployed ranker of a deploy run (``SimConfig.deploy_at``): read
"canary" as "the new ranker" below.

For a canary session in a regressed bucket, let ``h`` be DCG@k of the healthy canary list and ``b`` that of
the broken one (relevance signal flipped, :class:`~monitor.sim.rankers.Ranker`), both from latent grades
with the seed gains 1 / 0.7 / 0.3 / 0. The canary serves the broken list with probability

    p = min(1, (r × h + debt) / (h − b))

so the session's expected DCG@k is ``h − p (h − b) = (1 − r) h``: over many sessions the canary's mean
DCG@k is ``r`` (relative) below the healthy mean, which is the control's. Whatever a session cannot give
(``h ≤ b``, or p capped at 1) is carried as ``debt`` to the next sessions of the bucket, so the expectation
holds overall. Most sessions are untouched; a few are badly hurt, as with a real partial breakage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.sim.relevance import LEVEL_GAINS

_GAINS = np.asarray(LEVEL_GAINS, dtype=np.float64)
_DISCOUNTS = 1.0 / np.log2(np.arange(2, 1002, dtype=np.float64))


def dcg_of_levels(levels: npt.NDArray[np.int64], k: int) -> float:
    """DCG@k (linear gain, log2 discount) of levels in shown order, with the seed scale's gains."""
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
