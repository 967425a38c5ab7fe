"""The in-memory index of the sessions with state in Redis (monitor/store/session_index.py), without Redis."""

from __future__ import annotations

import math

from monitor.core.stream.config import StreamConfig
from monitor.core.stream.session import SessionRecord
from monitor.store.session_index import FROM_THE_START, SessionIndex, has_state

CONFIG = StreamConfig(state_ttl=1000.0, join_window=100.0, max_early_sessions=3)


def record(session_id: str, ts: float) -> SessionRecord:
    return SessionRecord(session_id=session_id, query_key="q", bucket="tail", ranker="r", variant="control",
                         ts=ts, k=10, docs=["d1"], scores=None, deadline=ts + 100.0)


def test_it_is_trusted_from_the_start_or_once_the_watermark_is_state_ttl_past_its_start() -> None:
    index = SessionIndex(CONFIG)
    assert index.trusted(FROM_THE_START, -math.inf) and index.trusted(FROM_THE_START, 5.0)
    assert not index.trusted(None, 5_000.0)  # a partition before its first commit with the index
    assert not index.trusted("4000.5", 5_000.0) and not index.trusted("4000", 5_000.0)
    assert index.trusted("3999.5", 5_000.0) and not index.trusted("3999.5", -math.inf)


def test_what_it_holds_is_true_only_at_the_commit_counter_it_was_read_or_committed_at() -> None:
    index = SessionIndex(CONFIG)
    index.load(0, "7", [(b"s1", 10.0), ("s2", 20.0)], [b"e1"])
    held = index.sessions(0, "7")
    assert held is not None and has_state(held, "s1") and has_state(held, "s2") and has_state(held, "e1")
    assert not has_state(held, "s3")
    index.committed(0, "7", 30.0, [record("s3", 30.0)], {"e1": None, "e2": {"d1": 2}})
    held = index.sessions(0, "8")
    assert held is not None and has_state(held, "s3") and has_state(held, "e2") and not has_state(held, "e1")
    index.committed(0, None, 30.0, [record("s4", 30.0)], {})  # an unfenced commit: the counter stays
    assert index.sessions(0, "8") is not None
    assert index.sessions(0, "9") is None  # another commit reached the partition: forgotten
    assert index.sessions(0, "8") is None
    index.committed(0, "9", 30.0, [record("s5", 30.0)], {})  # nothing held: nothing to add to
    assert index.sessions(0, "10") is None


def test_it_is_read_again_when_early_sessions_pass_twice_the_cap_and_forgets_old_records() -> None:
    index = SessionIndex(CONFIG)
    index.load(1, "1", [], [])
    index.committed(1, "1", 0.0, [], {f"e{i}": {"d": 1} for i in range(6)})  # 2 × max_early_sessions
    assert index.sessions(1, "2") is not None
    index.committed(1, "2", 0.0, [], {"e6": {"d": 1}})
    assert index.sessions(1, "3") is None  # Redis evicted some: the copy would only grow
    index.load(2, "1", [(f"s{i}", float(i)) for i in range(500)], [])
    index.committed(2, "1", 1000.0, [record(f"s{i}", float(i)) for i in range(500, 1000)], {})
    held = index.sessions(2, "2")
    assert held is not None and len(held.recorded) == 1000  # (pruned once it passes 1,024 or twice its size)
    index.committed(2, "2", 1600.0, [record(f"s{i}", float(i)) for i in range(1000, 1100)], {})
    held = index.sessions(2, "3")
    assert held is not None and min(held.recorded.values()) == 600.0 and len(held.recorded) == 500
    assert not has_state(held, "s599") and has_state(held, "s600") and has_state(held, "s1099")
    index.forget(2)
    assert index.sessions(2, "2") is None


def test_a_batch_is_told_what_is_held_whether_to_read_the_index_and_where_it_starts() -> None:
    index = SessionIndex(CONFIG)
    assert index.before(0, {}, -math.inf) == (None, False, FROM_THE_START)  # no record can exist yet
    assert index.before(0, {"wm": "5.0", "seq": "4"}, 5.0) == (None, False, "5.0")  # records before it
    assert index.before(0, {"sxs": FROM_THE_START, "seq": "4"}, 5.0) == (None, True, None)
    index.load(0, "4", [("s1", 5.0)], [])
    held, load, since = index.before(0, {"sxs": FROM_THE_START, "seq": "4"}, 5.0)
    assert held is not None and has_state(held, "s1") and (load, since) == (False, None)
    index.committed(0, "4", 5.0, [], {})  # fenced with 4: the script made it 5
    assert index.before(0, {"sxs": FROM_THE_START, "seq": "5"}, 5.0)[0] is held
    index.load(1, "", [], [])
    index.committed(1, "", 5.0, [], {})  # the partition's first commit: no counter before it, 1 after
    assert index.sessions(1, "1") is not None
