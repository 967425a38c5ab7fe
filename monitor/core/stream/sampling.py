"""Which impressions are sampled for annotation (:func:`sampled`), and which may be (:func:`may_sample`),
so that a store loads a query's judgments and shared grades only for the sessions that can use them.

The rule. Sampling spends a budget per bucket and period (:func:`budget_period`: the impression's event
time), in sessions or in judgments (``StreamConfig.budget_unit``), shared evenly between the partitions:
an impression is sampled while its partition's spend for its bucket in its period is below
``budget / partitions``. Each partition keeps its own spend, so the budget is a hard cap per partition and
period (in judgments mode up to one session's cost over it: a session's cost is added once it is sampled).
Nothing else decides: not the query's judgments, not the session's ranker, variant or documents, so every
arm is sampled at the same rate at any moment.

Independent of arrival order across partitions. In sessions mode the decision reads only what the
partition's own impressions made, in the partition's order (which Kafka keeps): the bucket (carried, or
estimated from the partition's own sketch), the event time and the partition's spend. No state another
partition writes (a query's judgments, grades shared between a query's sessions) and no wall clock: the
same impressions in each partition, in the same order, sample the same sessions however the partitions'
events interleave, in the worker (any number of processes, redelivery, restarts) and in process
(``monitor replay --partitions N``, which routes each event as Kafka's partitioner does). With a different
partition count the shares and the partitions' orders differ, and so do the sessions sampled once the
budget binds.

In judgments mode a session's cost is the number of documents its request lists, those without a grade
for it when its impression is processed (its early labels, its query's judgments and shared grades): the
spend, and so which later sessions of a period are sampled once the budget binds, depends on what other
partitions had graded by then (docs/worker.md, "The annotation budget").
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
    """Whether an impression of ``bucket`` is sampled: its partition's spend in the current period
    (``loaded.budget_used``) is below the bucket's share. The rule reads the bucket and the spend, never the
    query's judgments or the session's ranker, variant or documents, so every arm is sampled at the same rate
    at any moment.

    ``sessions``: the spend is the number of sessions sampled, each one counted, whatever its query has
    graded (letting a judged query's sessions in outside the budget would make the decision depend on
    whether another partition's query-level judgment was processed first). ``judgments``: the spend is the
    number of documents requested (added once a session is sampled, see
    :func:`monitor.core.stream.join.step`); letting a session in because its own documents are judged (it
    costs nothing) would favour the ranker that shows judged documents."""
    return sampled_by(bucket, loaded.budget_used.get(bucket, 0.0), config, partitions)


def sampled_by(bucket: str, spent: float, config: StreamConfig, partitions: int) -> bool:
    """:func:`sampled` from what it reads: the bucket's ``spent`` budget this period on the partition.

    >>> config = StreamConfig(budget={"head": 8, "torso": 8, "tail": 8})
    >>> sampled_by("tail", 1.0, config, 4), sampled_by("tail", 2.0, config, 4)
    (True, False)
    """
    return spent < config.budget[bucket] / partitions


def may_sample(event: Impression, spent: Mapping[str, float], config: StreamConfig, partitions: int) -> bool:
    """Whether a step may sample ``event`` later in a batch, knowing only what its period's budget had
    spent per bucket on the partition when the batch started (``spent``).

    True for every impression :func:`sampled` takes (a superset): within a batch a period's spend only
    grows (every sampled session adds a non-negative amount), so a bucket not below its share at the start is
    not below later; an impression without ``query_bucket`` may be estimated into any bucket; an impression
    of an undeclared variant or ranker is never sampled.

    >>> config = StreamConfig(budget={"head": 8, "torso": 8, "tail": 8})
    >>> tail = Impression("s", "q", "r", 0.0, (), query_bucket="tail")
    >>> may_sample(tail, {"tail": 2.0}, config, 4), may_sample(tail, {"head": 0.0}, config, 4)
    (False, True)
    """
    if undeclared(event, config) is not None:
        return False
    buckets = (event.query_bucket,) if event.query_bucket is not None else tuple(config.budget)
    return any(spent.get(b, 0.0) < config.budget[b] / partitions for b in buckets)
