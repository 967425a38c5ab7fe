"""Which impressions are sampled for annotation (:func:`sampled`), and which may be (:func:`may_sample`),
so that a store loads a query's judgments and shared grades only for the sessions that can use them.

The rule: a budget paced in event time. Sampling spends a budget per bucket and period
(:func:`budget_period`: the impression's event time), in sessions or in judgments
(``StreamConfig.budget_unit``), shared evenly between the partitions: each partition's share of a bucket
is ``share = budget / partitions`` per period, and it is paced like a token bucket that fills at ``share``
per period (:func:`allowance`). An impression at ``ts``, a fraction ``elapsed`` into its period, is
sampled while its partition's spend for its bucket in that period is below

    allowance = min(share, share · elapsed + 1)

(``+ 1``: one unit of burst, so that the first impression of a period can be taken). With traffic above
the budget the sampled sessions are spread evenly over the period (at 10 times the budget, 25% ± 5% of an
hour's in each quarter of it: tests/unit/test_paced_budget.py), so the rolling windows and the canary's
looks all get labelled sessions, and a deploy is measured within minutes rather than at the next period.
Traffic below the budget is all sampled while it is spread over the period; a burst at the very start of
a period is not all taken (the allowance has not filled yet), and what a period leaves unspent is lost
(the next period starts again from the one unit of burst).

Each partition keeps its own spend and ``allowance ≤ share``, so the budget is a hard cap per partition
and period (sessions: at most ``ceil(share)``; judgments: up to one session's cost over it, as a session's
cost is added once it is sampled). Nothing else decides: not the query's judgments, not the session's
ranker, variant or documents, so every arm is sampled at the same rate at any moment.

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

The rule has one copy, :func:`allowance`: the step (:func:`sampled`), ``lean.only_counted`` (through
:func:`sampled_by`) and the Redis writer's ``prefetch.sampled_queries`` and its shortcuts (through
:func:`may_sample` and :func:`allowance`) all read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from monitor.core.events import Impression
from monitor.core.stream.admission import undeclared
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.transition import Loaded
from monitor.core.stream.windows import slice_index


def budget_period(ts: float, config: StreamConfig) -> int:
    """The budget period of event time ``ts``: ``floor(ts / budget_period)``."""
    return slice_index(ts, config.budget_period)


def allowance(bucket: str, ts: float, config: StreamConfig, partitions: int) -> float:
    """What a partition may have spent of ``bucket``'s budget in the period of ``ts`` and still sample an
    impression at ``ts``: ``min(share, share · elapsed + 1)``, with ``share = budget[bucket] / partitions``
    and ``elapsed = (ts − period start) / budget_period`` in [0, 1) (computed as ``ts / budget_period`` less
    its floor, the period's index: the same division as :func:`budget_period`). It grows from 1 at the
    period's start to ``share`` at its end (a token bucket filling at ``share`` per period, with one unit
    of burst), and never exceeds ``share``: a hard cap.

    >>> config = StreamConfig(budget={"head": 400, "torso": 8, "tail": 0}, budget_period=3600)
    >>> [allowance("head", ts, config, 4) for ts in (7200.0, 7200.0 + 900, 7200.0 + 3599)]
    [1.0, 26.0, 100.0]
    >>> allowance("torso", 900.0, config, 4), allowance("tail", 900.0, config, 4)
    (1.5, 0.0)
    """
    share = config.budget[bucket] / partitions
    position = ts / config.budget_period  # (its floor is the period: budget_period)
    elapsed = position - math.floor(position)  # exact, and in [0, 1) whatever the rounding of the division
    return min(share, share * elapsed + 1.0)


def sampled_by(bucket: str, ts: float, spent: float, config: StreamConfig, partitions: int) -> bool:
    """:func:`sampled` from what it reads: an impression of ``bucket`` at ``ts``, with the bucket's
    ``spent`` budget in the period of ``ts`` on the partition, is sampled iff ``spent`` is below the
    :func:`allowance` at ``ts``.

    >>> config = StreamConfig(budget={"head": 8, "torso": 8, "tail": 8}, budget_period=3600)
    >>> sampled_by("tail", 0.0, 0.0, config, 4), sampled_by("tail", 0.0, 1.0, config, 4)
    (True, False)
    >>> sampled_by("tail", 1800.0, 1.0, config, 4), sampled_by("tail", 3599.0, 2.0, config, 4)
    (True, False)
    """
    return spent < allowance(bucket, ts, config, partitions)


def sampled(bucket: str, ts: float, loaded: Loaded, config: StreamConfig, partitions: int) -> bool:
    """Whether an impression of ``bucket`` at event time ``ts`` is sampled: its partition's spend in the
    period of ``ts`` (``loaded.budget_used``) is below the :func:`allowance` at ``ts``. The rule reads the
    bucket, the time and the spend, never the query's judgments or the session's ranker, variant or
    documents, so every arm is sampled at the same rate at any moment.

    ``sessions``: the spend is the number of sessions sampled, each one counted, whatever its query has
    graded (letting a judged query's sessions in outside the budget would make the decision depend on
    whether another partition's query-level judgment was processed first). ``judgments``: the spend is the
    number of documents requested (added once a session is sampled, see
    :func:`monitor.core.stream.join.step`); letting a session in because its own documents are judged (it
    costs nothing) would favour the ranker that shows judged documents."""
    return sampled_by(bucket, ts, loaded.budget_used.get(bucket, 0.0), config, partitions)


def may_sample(event: Impression, spent: Mapping[tuple[str, int], float], config: StreamConfig,
               partitions: int) -> bool:
    """Whether a step may sample ``event`` later in a batch, knowing only what the partition had spent per
    (bucket, period) when the batch started (``spent``).

    True for every impression :func:`sampled` takes (a superset): within a batch a period's spend only
    grows (every sampled session adds a non-negative amount) and the :func:`allowance` is taken at the
    impression's own ``ts``, so a bucket whose spend at the start is not below the allowance at ``ts`` is
    not below it later; an impression without ``query_bucket`` may be estimated into any bucket; an
    impression of an undeclared variant or ranker is never sampled.

    >>> config = StreamConfig(budget={"head": 8, "torso": 8, "tail": 8}, budget_period=600)
    >>> tail = Impression("s", "q", "r", 300.0, (), query_bucket="tail")
    >>> may_sample(tail, {("tail", 0): 2.0}, config, 4), may_sample(tail, {("tail", 0): 1.5}, config, 4)
    (False, True)
    """
    if undeclared(event, config) is not None:
        return False
    ts = event.ts
    period = budget_period(ts, config)
    buckets = (event.query_bucket,) if event.query_bucket is not None else tuple(config.budget)
    return any(sampled_by(b, ts, spent.get((b, period), 0.0), config, partitions) for b in buckets)
