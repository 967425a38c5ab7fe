"""Which impressions are sampled for annotation (:func:`sampled`), and which may be (:func:`may_sample`),
so that a store loads a query's judgments and shared grades only for the sessions that can use them.

Sampling spends a budget per bucket and period (:func:`budget_period`), in sessions or in judgments
(``StreamConfig.budget_unit``), shared evenly between the partitions. An impression that is not sampled
reads nothing of its query but, in sessions mode, whether the query has query-level judgments.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.core.events import Impression
from monitor.core.stream.admission import undeclared
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.transition import Loaded
from monitor.core.stream.windows import slice_index


def budget_period(ts: float, config: StreamConfig) -> int:
    return slice_index(ts, config.budget_period)


def sampled(bucket: str, loaded: Loaded, config: StreamConfig, partitions: int) -> bool:
    """Whether an impression of ``bucket`` is sampled. The rule reads the bucket, the budget spent in the
    current period and (in sessions mode) whether the query has query-level judgments; never the
    session's ranker, variant or documents, so every arm is sampled at the same rate at any moment.

    The bucket's budget per period is shared evenly between the partitions (each keeps its own count): a
    session is sampled while the partition's spend is below its share. ``sessions``: the spend is the
    number of sessions sampled, and sessions of a query with query-level judgments are always sampled,
    outside the budget. ``judgments``: the spend is the number of documents requested (added once a
    session is sampled, see :func:`monitor.core.stream.join.step`), and no session bypasses the rule: a
    judged query's session may still show unjudged documents, whose requests would escape the budget, and
    letting a session in because its own documents are judged (it costs nothing) would favour the ranker
    that shows judged documents."""
    spent = loaded.budget_used.get(bucket, 0.0)
    return sampled_by(bucket, spent, bool(loaded.query_labels), config, partitions)


def sampled_by(bucket: str, spent: float, judged: bool, config: StreamConfig, partitions: int) -> bool:
    """:func:`sampled` from what it reads: the bucket's ``spent`` budget this period and whether the query
    has query-level judgments (``judged``)."""
    below = spent < config.budget[bucket] / partitions
    if config.budget_unit == "judgments":
        return below
    return judged or below


def may_sample(event: Impression, spent: Mapping[str, float], judged: bool, config: StreamConfig,
               partitions: int) -> bool:
    """Whether a step may sample ``event`` later in a batch, knowing only what its period's budget had
    spent per bucket when the batch started (``spent``) and whether its query may have query-level
    judgments (``judged``: true whenever it has some, then or from an annotation earlier in the batch).

    True for every impression :func:`sampled` takes (a superset): within a batch a period's spend only
    grows (every sampled session adds a positive amount), so a bucket not below its share at the start is
    not below later; an impression without ``query_bucket`` may be estimated into any bucket; an impression
    of an undeclared variant or ranker is never sampled. A judged query bypasses the budget only in
    sessions mode.

    >>> config = StreamConfig(budget={"head": 8, "torso": 8, "tail": 8})
    >>> tail = Impression("s", "q", "r", 0.0, (), query_bucket="tail")
    >>> may_sample(tail, {"tail": 2.0}, False, config, 4), may_sample(tail, {"head": 0.0}, False, config, 4)
    (False, True)
    >>> may_sample(tail, {"tail": 2.0}, True, config, 4)
    True
    """
    if undeclared(event, config) is not None:
        return False
    if judged and config.budget_unit == "sessions":
        return True
    buckets = (event.query_bucket,) if event.query_bucket is not None else tuple(config.budget)
    return any(spent.get(b, 0.0) < config.budget[b] / partitions for b in buckets)
