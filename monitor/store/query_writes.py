"""The per-query writes of a batch and the fan-outs they cause.

Per-query keys (``srm:{q:<hash>}:…``) are in other hash slots than the partition's, so they are written
before the partition's transaction, idempotently: a session joining its query's pending set, a query
annotation's grades merged by :data:`~monitor.store.scripts.QUERY_MERGE`, a grading session's grades
merged into the query's shared grades by :data:`~monitor.store.scripts.SHARED_MERGE`. What they change
reaches other sessions as fan-out annotations, returned per step for the batch's outbox.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.core.grades import Scale
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.held_grades import (
    SHARED_KEEP,
    Labels,
    SharedGrades,
    changed_shared,
    fan_out_annotation,
    fan_outs,
    shared_refresh,
)
from monitor.core.stream.transition import Loaded, Transition
from monitor.store.batch import FanOut
from monitor.store.client import RedisClient
from monitor.store.keys import Keys, text
from monitor.store.scripts import Scripts, parse_shared


async def query_writes(redis: RedisClient, keys: Keys, scripts: Scripts, config: StreamConfig, scale: Scale,
                       partition: int, steps: Sequence[tuple[int, Transition, Loaded]]
                       ) -> tuple[dict[int, FanOut], int]:
    """Per-query keys live in other slots: idempotent writes before the transaction, then the
    query-level labels to fan out to sessions (published keyed by session), and the refreshes of the
    query's shared grades, per step index; and how many query grades lost to a later ts.

    A query annotation's grades are merged by :data:`QUERY_MERGE` (the latest ts wins); only the
    grades that won are fanned out, with their ts, so a session applies the same rule to them.

    A judgment for a query written on another partition after an impression of the query read the
    query's labels, and fanned out before that impression's session joined the query's pending set,
    would reach no one; so each such impression re-reads the labels after joining the set. (Either
    the judgment's fan-out saw the session or this read sees the judgment; both is harmless.) The same
    for the query's shared grades: a session whose re-read differs from what its impression read gets
    a refresh. A refresh carries no grade that counts: the session takes the query's shared grades
    from Redis when it processes it, so an old refresh overtaking a newer one changes nothing.

    On a Redis Cluster the writes wait until a replica has them
    (:func:`~monitor.store.client.execute_replicated`): the partition's offsets, on another shard,
    would not tell that a failover lost them."""
    ttl = int(config.state_ttl)
    writes = redis.pipeline(transaction=False)
    checks: list[tuple[int, str, str, Labels]] = []   # (step, query key, session, labels it saw)
    shared_checks: list[tuple[int, str, str, SharedGrades]] = []  # (step, query key, session, it saw)
    # (step, query key, labels, their ts, the merge's place in the pipeline)
    spreads: list[tuple[int, str, Labels, float | None, int]] = []
    # per query key: (step, grading session, its ts, its grades), in step order (one merge call per query)
    shares: dict[str, list[tuple[int, str, float, Labels]]] = {}
    for index, t, loaded in steps:
        for qkey, session_id in t.pending_queries:
            writes.sadd(keys.q(qkey, "pending"), f"{partition}:{session_id}")
            writes.expire(keys.q(qkey, "pending"), ttl)
            checks.append((index, qkey, session_id, loaded.query_labels))
            if config.share_session_grades:
                shared_checks.append((index, qkey, session_id, loaded.shared))
        if t.query_labels is not None:
            qkey, labels = t.query_labels
            spreads.append((index, qkey, labels, t.query_ts, len(writes)))
            merge: list[str | int] = ["" if t.query_ts is None else repr(float(t.query_ts)), ttl]
            for doc, level in labels.items():
                merge += [doc, level]
            await scripts.query_merge(keys=[keys.q(qkey, "labels"), keys.q(qkey, "label_ts")], args=merge,
                                    client=writes)
        if t.shared is not None:
            qkey, origin, ts, labels = t.shared
            shares.setdefault(qkey, []).append((index, origin, ts, labels))
    places: dict[str, int] = {}
    for qkey, grading in shares.items():  # one call per query: its sessions' grades in step order
        places[qkey] = len(writes)
        args: list[str | int] = [ttl, SHARED_KEEP]
        for _, origin, ts, labels in grading:
            args += [origin, repr(float(ts)), len(labels)]
            for doc, level in labels.items():
                args += [doc, level]
        await scripts.shared_merge(keys=[keys.q(qkey, "shared")], args=args, client=writes)
    if not checks and not spreads and not shares:
        return {}, 0
    touched = {qkey for _, qkey, _, _ in checks} | {s[1] for s in spreads} | set(shares)
    written = await scripts.execute(redis, writes, [keys.q(qkey, "labels") for qkey in sorted(touched)])
    reads = redis.pipeline(transaction=False)
    for _, qkey, _, _ in checks:
        reads.hgetall(keys.q(qkey, "labels"))
        reads.hgetall(keys.q(qkey, "label_ts"))
    shared_read = list(dict.fromkeys(qkey for _, qkey, _, _ in shared_checks))  # each query's hash once
    for qkey in shared_read:
        reads.hgetall(keys.q(qkey, "shared"))
    for _, qkey, _, _, _ in spreads:
        reads.smembers(keys.q(qkey, "pending"))
    for qkey in shares:
        reads.smembers(keys.q(qkey, "pending"))
    results = iter(await reads.execute())
    out: dict[int, FanOut] = {}
    stale = 0
    for index, _, session_id, seen in checks:
        stored, stamps = next(results), next(results)
        labels = {text(k): int(v) for k, v in stored.items()}
        missed = {d: g for d, g in labels.items() if seen.get(d) != g}
        if missed:  # with their ts: one fan-out per ts
            dated = {text(k): float(v) for k, v in stamps.items()}
            for annotation in fan_outs(session_id, missed, dated, scale):
                out.setdefault(index, []).append((session_id, annotation))
    entries = {qkey: parse_shared(next(results)) for qkey in shared_read}  # (parsed once per query too)
    for index, qkey, session_id, seen_shared in shared_checks:
        changed = changed_shared(entries[qkey], seen_shared, session_id)
        if changed:  # (its own grades, written in this batch, are in the hash too: not a change)
            out.setdefault(index, []).append(
                (session_id, shared_refresh(session_id, qkey, changed, scale)))
    for (index, _, labels, when, place), members in zip(spreads, results, strict=False):
        won = {text(doc) for doc in written[place]}
        stale += len(labels) - len(won)
        grades = {doc: level for doc, level in labels.items() if doc in won}
        if not grades:  # every grade lost to a later one: nothing reaches the sessions
            continue
        for member in sorted(text(m) for m in members):
            session_id = member.split(":", 1)[1]
            annotation = fan_out_annotation(session_id, grades, scale, when)
            out.setdefault(index, []).append((session_id, annotation))
    for (qkey, grading), members in zip(shares.items(), results, strict=False):
        sessions = sorted(text(m).split(":", 1)[1] for m in members)
        for (index, origin, _, labels), written_won in zip(grading, written[places[qkey]], strict=True):
            won = {text(doc) for doc in written_won}
            if not won:  # not the earliest grader of any of them: nobody else's grades changed
                continue
            grades = {doc: level for doc, level in labels.items() if doc in won}
            for session_id in sessions:
                if session_id != origin:
                    out.setdefault(index, []).append(
                        (session_id, shared_refresh(session_id, qkey, grades, scale)))
    return out, stale
