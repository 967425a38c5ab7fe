"""The Redis writer's decoding (monitor/store/admitting.py): impressions without their results unless most
took the full step, the same event either way once :meth:`BatchDecoder.shown` has it."""

from __future__ import annotations

import json

from monitor.core.decoding import decode_event, without_results
from monitor.core.events import DEFAULT_LIMITS, EventError, Impression
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.admission import declared_shadow
from monitor.core.stream.config import StreamConfig
from monitor.sim import SimConfig, simulate
from monitor.sim.config import ShadowSpec
from monitor.store.admitting import KEEP_ABOVE, BatchDecoder
from monitor.store.batch import Message

STREAM = simulate(SimConfig(seed=4, n_sessions=150, duration_s=3600, invalid_rate=0.05,
                             shadow=(ShadowSpec("ranker-s"), ShadowSpec("cand-x")))).events
CONFIG = StreamConfig(ranker_pattern="ranker-.*")


def decoder() -> BatchDecoder:
    return BatchDecoder(FOUR_LEVEL_SCALE, CONFIG, DEFAULT_LIMITS, lambda: None)


def test_either_way_every_message_gives_the_same_event_or_the_same_error() -> None:
    bare, keep = decoder(), decoder()
    keep.keep_results = True
    impressions = errors = 0
    for offset, event in enumerate(STREAM):
        message = Message(event.topic, offset, event.value, event.topic)
        a, b = bare.decode(message), keep.decode(message)
        if isinstance(b, EventError):
            assert isinstance(a, EventError) and (a.field, a.reason, a.code) == (b.field, b.reason, b.code)
            errors += 1
            continue
        if isinstance(b, Impression):
            impressions += 1
            assert a == without_results(b) and not a.results and b.results
            full = declared_shadow(decode_event(event.value, FOUR_LEVEL_SCALE), CONFIG)[0]
            kept = declared_shadow(b, CONFIG)[0]
            assert bare.shown(message, declared_shadow(a, CONFIG)[0]) == full  # decoded again
            assert keep.shown(message, kept) is kept  # (kept: not decoded again)
        else:
            assert a == b
    assert impressions > 100 and errors > 10  # (the test saw both)


def test_the_results_are_kept_while_most_impressions_take_the_full_step() -> None:
    d = decoder()
    assert not d.keep_results  # real traffic: most impressions only counted
    d.learn(100, int(KEEP_ABOVE * 100) + 1)
    assert d.keep_results
    d.learn(0, 0)  # a batch without impressions tells nothing
    assert d.keep_results
    d.learn(100, int(KEEP_ABOVE * 100))
    assert not d.keep_results
    raw = json.dumps({"type": "impression", "session_id": "s", "query": "q", "ranker": "ranker-a", "ts": 1e9,
                      "results": [{"doc_id": "a", "position": 1}]}).encode()
    message = Message("impressions", 0, raw, "impressions")
    event = d.decode(message)
    assert isinstance(event, Impression) and event.results == ()
    d.learn(10, 10)
    event = d.decode(message)
    assert isinstance(event, Impression) and [r.doc_id for r in event.results] == ["a"]


def test_undeclared_values_are_named_once() -> None:
    d = BatchDecoder(FOUR_LEVEL_SCALE, StreamConfig(ranker_pattern="ranker-[0-9]+"), DEFAULT_LIMITS, lambda: None)
    raw = json.dumps({"type": "impression", "session_id": "s", "query": "q", "ranker": "build-7", "ts": 1e9,
                      "results": [{"doc_id": "a", "position": 1}]}).encode()
    for offset in range(3):
        d.decode(Message("impressions", offset, raw, "impressions"))
    assert d.undeclared_new == [("ranker", "build-7")]
