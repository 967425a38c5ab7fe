"""Counters as typed keys (``monitor/core/stream/counters.py``): the Redis field of each counter is the one
written before counters had a type (existing state reads back the same), the encoding round-trips and is
unambiguous (or refuses a counter, naming it), the Lua commit is handed its counter fields, and the exporter
takes a labelled family's label from the counter's field."""

from __future__ import annotations

import math
from importlib.resources import files

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.core.errors import MonitorError
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import (
    EARLY_SESSIONS_EVICTED,
    LABELS_EVICTED,
    STALE_LABELS,
    Counter,
    dead_letter,
    decode_field,
    encode_field,
    labels_dropped,
    undeclared,
)
from monitor.core.stream.snapshot import Snapshot
from monitor.export.prometheus import RelevanceCollector
from monitor.store.batch import Batch
from monitor.store.keys import Keys

# (counter, the field the stores wrote for it before counters were typed: f"{group}|{name}", with the
# label value inside the name for the labelled families)
FIELDS = [
    (Counter("impressions", "tail|r1|control"), "tail|r1|control|impressions"),
    (Counter("sampled", "head|ranker:v2|canary"), "head|ranker:v2|canary|sampled"),
    (Counter("duplicate_impressions"), "|duplicate_impressions"),
    (STALE_LABELS, "|stale_labels"),
    (dead_letter("invalid_json"), "|dead_letter:invalid_json"),
    (dead_letter("undeclared_variant"), "|dead_letter:undeclared_variant"),
    (LABELS_EVICTED, "|labels_dropped:evicted"),
    (EARLY_SESSIONS_EVICTED, "|early_sessions_evicted"),
    (undeclared("variant"), "|undeclared:variant"),
    (undeclared("ranker"), "|undeclared:ranker"),
]


@pytest.mark.parametrize(("counter", "field"), FIELDS)
def test_each_counter_keeps_the_field_it_had(counter: Counter, field: str) -> None:
    assert encode_field(counter) == field
    assert decode_field(field) == counter


def test_the_named_families_are_labelled_counters_of_the_partition() -> None:
    assert dead_letter("oversized") == Counter("dead_letter", "", "oversized")
    assert labels_dropped("evicted") == LABELS_EVICTED == Counter("labels_dropped", label="evicted")
    assert undeclared("ranker") == Counter("undeclared", label="ranker")
    assert len({dead_letter("a"), dead_letter("a"), dead_letter("b"), Counter("dead_letter")}) == 3


@pytest.mark.parametrize("counter", [
    Counter("x", "a|b|c", "with:colons:inside"),   # a label may hold ':'
    Counter("x", "a:b|c:d", "e"),                  # so may a group, and '|'
    Counter("x", "||", ""),                        # a group of bars
    Counter("x", "|lead", "l"),
    Counter("x", "trail|", ""),
    Counter("名前", "頭|ランカー|対照", "理由"),
    Counter("x", "", ":"),                         # a label that is only a colon
    Counter("x", "g", "a:"),
])
def test_awkward_groups_and_labels_round_trip(counter: Counter) -> None:
    assert decode_field(encode_field(counter)) == counter


@pytest.mark.parametrize(("counter", "message"), [
    (Counter(""), "name must be non-empty"),
    (Counter("a|b"), "without '|' or ':': 'a|b'"),
    (Counter("dead_letter:x"), "without '|' or ':': 'dead_letter:x'"),
    (Counter("x", "g", "a|b"), "label must not contain '|': 'a|b'"),
])
def test_a_counter_no_field_reads_back_as_is_refused(counter: Counter, message: str) -> None:
    with pytest.raises(MonitorError, match=message.replace("|", r"\|")):
        encode_field(counter)


@pytest.mark.parametrize("make", [dead_letter, labels_dropped, undeclared])
@pytest.mark.parametrize("label", ["", "a|b"])
def test_a_family_refuses_a_label_it_cannot_store(make: object, label: str) -> None:
    with pytest.raises(MonitorError, match="label must be non-empty and without '\\|'"):
        make(label)  # type: ignore[operator]


@pytest.mark.parametrize("field", ["no_bar", "", "g|", "|", "g|x:", "g|:label", "|:"])
def test_a_field_the_encoding_cannot_have_written_is_refused(field: str) -> None:
    with pytest.raises(MonitorError, match="not a counter field"):
        decode_field(field)


NAMES = st.text(min_size=1, max_size=8).filter(lambda s: "|" not in s and ":" not in s)
GROUPS = st.text(max_size=12)
LABELS = st.text(max_size=8).filter(lambda s: "|" not in s)


@given(NAMES, GROUPS, LABELS)
def test_every_encodable_counter_round_trips(name: str, group: str, label: str) -> None:
    counter = Counter(name, group, label)
    assert decode_field(encode_field(counter)) == counter


# few characters, so that two drawn counters are often near-equal: the fields of different ones must differ
SMALL = st.builds(Counter, st.text(alphabet="a", min_size=1, max_size=2), st.text(alphabet="a|:", max_size=3),
                  st.text(alphabet="a:", max_size=2))


@given(SMALL, SMALL)
def test_two_counters_never_share_a_field(one: Counter, other: Counter) -> None:
    assert (encode_field(one) == encode_field(other)) == (one == other)


@given(st.text(alphabet="ab|:", max_size=10))
def test_a_field_decodes_to_the_counter_that_writes_it_or_is_refused(field: str) -> None:
    try:
        counter = decode_field(field)
    except MonitorError:
        return
    assert encode_field(counter) == field


def test_the_commit_hands_the_eviction_counters_fields_to_the_script() -> None:
    """``apply.lua`` counts evicted early labels in the fields the ``early`` op names: the encoded
    :data:`LABELS_EVICTED` and :data:`EARLY_SESSIONS_EVICTED`, not strings of its own."""
    batch = Batch(3)
    batch.early["s1"] = {"d": "高"}
    ops = batch.ops(Keys("t"), StreamConfig(max_early_sessions=7), {})
    (early,) = [op for op in ops.ops if op[0] == "early"]
    assert early[2:] == ["t:{g3}:p3:meta", "t:{g3}:p3:e:", "t:{g3}:cnt", "7", "|labels_dropped:evicted",
                         "|early_sessions_evicted", "s1"]
    script = files("monitor.store").joinpath("lua", "apply.lua").read_text(encoding="utf-8")
    assert "labels_dropped" not in script and "early_sessions_evicted" not in script


def test_the_batch_writes_each_counter_at_its_field() -> None:
    batch = Batch(0)
    batch.count(dead_letter("a:b"), 2.0)
    batch.aggregates.count(Counter("impressions", "tail|r|control"))
    ops = batch.ops(Keys("t"), StreamConfig(), {})
    (hincr,) = [op for op in ops.ops if op[0] == "hincr" and ops.keys[int(op[1]) - 1] == "t:{g0}:cnt"]
    assert hincr[2:] == ["|dead_letter:a:b", "2.0", "tail|r|control|impressions", "1.0"]


def _exported(counters: dict[Counter, float]) -> CollectorRegistry:
    registry = CollectorRegistry()
    snapshot = Snapshot(StreamConfig(), -math.inf, {}, counters, {}, {})
    registry.register(RelevanceCollector(lambda: snapshot))
    return registry


def test_the_exporter_takes_each_familys_reason_from_the_counters_label() -> None:
    registry = _exported({dead_letter("invalid_json"): 3.0, dead_letter("odd:code"): 1.0,
                          labels_dropped("evicted"): 5.0, undeclared("ranker"): 2.0,
                          Counter("impressions", "tail|r1|control"): 7.0})
    value = registry.get_sample_value
    assert value("search_relevance_dead_letters_total", {"reason": "invalid_json"}) == 3.0
    assert value("search_relevance_dead_letters_total", {"reason": "odd:code"}) == 1.0
    assert value("search_relevance_labels_dropped_total", {"reason": "evicted"}) == 5.0
    assert value("search_relevance_undeclared_impressions_total", {"reason": "ranker"}) == 2.0
    assert value("search_relevance_impressions_total",
                 {"bucket": "tail", "ranker": "r1", "variant": "control"}) == 7.0


def test_the_exporter_exports_a_family_only_without_a_group_and_with_a_label() -> None:
    registry = _exported({Counter("dead_letter"): 4.0, Counter("dead_letter", "tail|r1|control", "x"): 6.0,
                          Counter("undeclared", "tail|r1|control", "variant"): 1.0})
    samples = [s for metric in registry.collect() for s in metric.samples
               if s.name.startswith(("search_relevance_dead_letters", "search_relevance_undeclared"))]
    assert samples == []
