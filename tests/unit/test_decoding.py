"""The stream's fast decoder (monitor/core/decoding.py) against the field-by-field reference
(monitor/core/event_checks.decode_checked): the same event for every valid message, the reference's error
(field, reason, code) for every invalid one, and the fast path never accepting what the reference refuses,
on the simulator's traffic, the 10,000-event bad-input corpus and generated JSON near the schemas."""

from __future__ import annotations

import functools
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.decoding import decode_event, fast_decode, without_results
from monitor.core.event_checks import decode_checked
from monitor.core.events import (
    DEFAULT_LIMITS,
    Annotation,
    Deploy,
    Event,
    EventError,
    Impression,
    Label,
    Limits,
    encode_annotation,
)
from monitor.core.grades import FOUR_LEVEL_SCALE, parse_scale
from monitor.sim import SimConfig, simulate
from monitor.sim.corpus import build_corpus

STREAM = simulate(SimConfig(seed=9, n_sessions=400, duration_s=3600, invalid_rate=0.0, bucket_hint_share=0.5,
                            correction_prob=0.2, query_judgment_share=0.3)).events
CORPUS = build_corpus(STREAM[:3000], malformed=10_000, seed=9)
TREC = parse_scale("trec")


def outcome(decode: Any, raw: bytes, scale: Any = FOUR_LEVEL_SCALE, limits: Limits = DEFAULT_LIMITS) -> Event | tuple[str, ...]:
    """The event, or the error as (field, reason, code); any other exception propagates (a bug)."""
    try:
        return decode(raw, scale, limits)  # type: ignore[no-any-return]
    except EventError as error:
        return (error.field, error.reason, error.code)


def agree(raw: bytes, scale: Any = FOUR_LEVEL_SCALE, limits: Limits = DEFAULT_LIMITS) -> Event | None:
    """Assert that the fast path accepts only what the reference accepts, with the same event, and that
    decode_event's outcome is the reference's; return what the fast path gave."""
    reference = outcome(decode_checked, raw, scale, limits)
    fast = fast_decode(raw, scale, limits)
    assert fast is None or fast == reference, (raw, fast, reference)
    assert outcome(decode_event, raw, scale, limits) == reference, raw
    # results=False (the Redis writer's first decode): the same checks and errors, the event without results
    bare = reference if isinstance(reference, tuple) else without_results(reference)
    assert outcome(functools.partial(decode_event, results=False), raw, scale, limits) == bare, raw
    fast_bare = fast_decode(raw, scale, limits, results=False)
    assert (fast_bare is None) == (fast is None) and (fast_bare is None or fast_bare == bare), raw
    return fast


def test_every_valid_message_of_the_simulator_takes_the_fast_path_and_gives_the_reference_event() -> None:
    objs = [json.loads(e.value) for e in STREAM]
    assert {o["type"] for o in objs} == {"impression", "annotation", "deploy"}
    assert any("session_id" not in o for o in objs if o["type"] == "annotation")  # query-level judgments
    assert any(b'"grades"' in e.value for e in STREAM) and any(b'"grade":' in e.value for e in STREAM)
    assert any(b"query_bucket" not in e.value for e in STREAM if e.topic == "impressions")
    for event in STREAM:
        assert agree(event.value) is not None, event.value


def test_the_bad_input_corpus_gets_exactly_the_reference_errors() -> None:
    refused = 0
    for sample in CORPUS:
        agree(sample.value)
        refused += isinstance(outcome(decode_event, sample.value), tuple)
    assert refused > 8_000  # most of the corpus is refused by decoding itself (the rest by topic or settings)


def test_the_annotations_the_worker_publishes_take_the_fast_path() -> None:
    """Fan-outs of a query's judgments (scope query) and refreshes of its shared grades (scope shared)."""
    labels = (Label("d1", FOUR_LEVEL_SCALE.parse("高")), Label("d2", FOUR_LEVEL_SCALE.parse("无")))
    for annotation in (Annotation(labels, session_id="s1", ts=5.0, from_query=True),
                       Annotation(labels, session_id="s1", query_key="0123456789abcdef01234567"),
                       Annotation(labels, query="蓝牙耳机", ts=7.5)):
        assert agree(encode_annotation(annotation)) == annotation


def test_results_out_of_order_are_ordered_by_position_as_the_reference_does() -> None:
    raw = json.dumps({"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 5,
                      "results": [{"doc_id": "b", "position": 2, "score": 1}, {"doc_id": "a", "position": 1}]})
    event = agree(raw.encode())
    assert event is not None and [r.doc_id for r in event.results] == ["a", "b"]  # type: ignore[union-attr]


def test_result_text_is_kept_as_the_reference_keeps_it_however_its_key_is_spelled() -> None:
    """Results without a text key are not looked at for text (the bytes say so); a key spelled with an
    escape (``\\u0074itle``) is a ``title`` all the same, and cut to the limit as the reference cuts it."""
    limits = Limits(max_text_chars=3)
    for key in ("title", "snippet", "url", "\\u0074itle", "sn\\u0069ppet", "\\u0075rl"):
        raw = ('{"type":"impression","session_id":"s","query":"q","ranker":"r","ts":5,"results":['
               f'{{"doc_id":"a","position":1,"{key}":"Earbuds"}},{{"doc_id":"b","position":2,"{key}":"  "}}]}}')
        event = agree(raw.encode(), limits=limits)
        assert isinstance(event, Impression), raw
        name = {"\\u0074itle": "title", "sn\\u0069ppet": "snippet", "\\u0075rl": "url"}.get(key, key)
        assert [getattr(r, name) for r in event.results] == ["Ear", None], raw
    plain = agree(b'{"type":"impression","session_id":"s","query":"q","ranker":"r","ts":5,'
                  b'"results":[{"doc_id":"a","position":1,"score":0.5}]}', limits=limits)
    assert isinstance(plain, Impression) and plain.results[0].title is None


# generated JSON near the schemas: each field takes valid values and the values validators trip on
TEXT = st.sampled_from(["s1", "q", "蓝牙耳机", "", " ", "\t\n", "a" * 257, "a" * 1025, "x\u0000y", "é"])
NUMBER = st.sampled_from([0, 1, -1, 0.0, -0.0, 1.5, 1e308, 10**20, 10**400, 1763712000, 1763712000.25, 2, 3, 4,
                          0.05, 0.5, -0.1, 1.0])
ODD = st.sampled_from([None, True, False, [], {}, "2025-11-21T08:00:00Z", "2025-11-21T08:00:00", "1"])
VALUE = st.one_of(TEXT, NUMBER, ODD)


def results() -> st.SearchStrategy[Any]:
    """A results list near the schema, half the time a valid one (distinct documents, positions 1..n in any
    order): random lists alone are rarely valid, and an impression with shadow lists needs several valid
    ones for the fast path to take it."""
    score = st.one_of(st.floats(allow_nan=False), st.integers())
    item = st.fixed_dictionaries({"doc_id": st.sampled_from(["d1", "d2", "d3", "文档"]),
                                  "position": st.integers(1, 3)}, optional={"score": score})
    valid = st.integers(1, 3).flatmap(lambda n: st.permutations(range(1, n + 1))).flatmap(
        lambda order: st.tuples(*(st.fixed_dictionaries({"doc_id": st.just(f"d{i}"), "position": st.just(p)},
                                                        optional={"score": score})
                                  for i, p in enumerate(order, 1))).map(list))
    return st.one_of(valid, st.lists(item, min_size=1, max_size=3))


GRADES = st.lists(st.fixed_dictionaries({"doc_id": st.sampled_from(["d1", "d2"]),
                                         "grade": st.sampled_from(["高", "中", "低", "无", "high", 0, 1, 2, 3,
                                                                   3.0, 7])}), min_size=1, max_size=3)
BASES = st.one_of(
    st.fixed_dictionaries({"type": st.just("impression"), "session_id": st.just("s1"), "query": st.just("q"),
                           "ranker": st.just("r"), "ts": st.just(1763712000.5), "results": results()},
                          optional={"variant": st.just("canary"),
                                    "query_bucket": st.sampled_from(["head", "torso", "tail"]),
                                    "schema": st.just(1),
                                    "shadow": st.lists(st.fixed_dictionaries(
                                        {"ranker": st.sampled_from(["r2", "r3", "r"]), "results": results()}),
                                        max_size=2)}),
    st.fixed_dictionaries({"type": st.just("annotation"), "session_id": st.just("s1"), "grades": GRADES},
                          optional={"scope": st.sampled_from(["session", "query"]), "ts": st.just(5.0)}),
    st.fixed_dictionaries({"type": st.just("annotation"), "session_id": st.just("s1"), "doc_id": st.just("d1"),
                           "grade": st.sampled_from(["高", 2])}, optional={"ts": st.just(5)}),
    st.fixed_dictionaries({"type": st.just("annotation"), "session_id": st.just("s1"), "scope": st.just("shared"),
                           "query_key": st.just("0123456789abcdef01234567"), "grades": GRADES}),
    st.fixed_dictionaries({"type": st.just("annotation"), "query": st.just("q"), "grades": GRADES}),
    st.fixed_dictionaries({"type": st.just("deploy"), "kind": st.sampled_from(["deploy", "canary_start", "canary_end",
                                                                             "rollback"]),
                           "ranker": st.just("r2"), "ts": st.just(1.0)}, optional={"previous": st.just("r1")}),
    st.fixed_dictionaries({"type": st.just("deploy"), "kind": st.sampled_from(["canary_start", "canary_share"]),
                           "ranker": st.just("r2"), "ts": st.just(1.0), "share": st.sampled_from([0.05, 0.5, 0.999])},
                          optional={"previous": st.just("r1")}),
)
FIELDS = ["type", "session_id", "query", "ranker", "ts", "results", "variant", "query_bucket", "schema", "scope",
          "query_key", "grades", "doc_id", "grade", "kind", "previous", "share", "shadow", "extra"]


@settings(max_examples=3000, deadline=None)
@given(BASES, st.lists(st.tuples(st.sampled_from(FIELDS), st.one_of(VALUE, st.just(KeyError))), max_size=2),
       st.booleans())
@pytest.mark.slow
def test_generated_events_agree_with_the_reference(base: dict[str, Any], edits: list[tuple[str, Any]],
                                                   ascii_only: bool) -> None:
    """Valid events (of every shape) with up to two fields replaced by a value validators trip on, or
    removed; and in the results and grades, an item's field replaced."""
    obj = dict(base)
    for name, value in edits:
        if value is KeyError:
            obj.pop(name, None)
        else:
            obj[name] = value
    raw = json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    agree(raw)
    agree(raw, TREC)
    agree(raw, FOUR_LEVEL_SCALE, Limits(max_results=2, max_grades=1, max_id_chars=2, max_query_chars=3,
                                        max_shadow_lists=1))


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(BASES, st.sampled_from(["doc_id", "position", "score", "grade"]), VALUE)
def test_an_item_of_the_results_or_grades_edited_agrees_with_the_reference(base: dict[str, Any], name: str,
                                                                           value: Any) -> None:
    obj = json.loads(json.dumps(base))
    items = obj.get("results") or obj.get("grades")
    if items:
        items[-1][name] = value
    if obj.get("shadow") and name != "grade":  # and in the last shadow list's results
        obj["shadow"][-1]["results"][-1][name] = value
    agree(json.dumps(obj, ensure_ascii=False).encode())


def test_generated_events_are_accepted_often_enough_to_test_the_fast_path() -> None:
    """The bases are valid, and the fast path takes them (else the properties above would test little).

    Searched with no example database, as on a fresh clone, and a budget that finds the rarest (an
    impression whose shadow lists are all valid: about 1 draw in 70) every time: with Hypothesis's default
    it was missed on about half of fresh runs."""
    from hypothesis import find
    search = settings(max_examples=5000, database=None)
    for kind in ("impression", "annotation", "deploy"):
        found = find(BASES, lambda o, k=kind: o["type"] == k and fast_decode(json.dumps(o).encode(), FOUR_LEVEL_SCALE)
                     is not None, settings=search)
        assert found["type"] == kind
    shadowed = find(BASES, lambda o: bool(o.get("shadow")) and fast_decode(json.dumps(o).encode(), FOUR_LEVEL_SCALE)
                    is not None, settings=search)
    assert shadowed["shadow"]


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([e.value for e in STREAM[:200]]), st.data())
def test_bytes_edited_anywhere_agree_with_the_reference(raw: bytes, data: st.DataObject) -> None:
    """Truncations, insertions and replacements of bytes, escapes and duplicated keys in real messages."""
    at = data.draw(st.integers(0, len(raw)))
    insert = data.draw(st.sampled_from([b"", b"\\ud800", b"\\udc00", b'"type":"deploy",', b'"ts":1,',
                                        b"\xff", b"\xed\xa0\x80", b"\x01", b" ", b"NaN", b"1e999", b"}", b'"']))
    cut = data.draw(st.integers(0, 3))
    agree(raw[:at] + insert + raw[at + cut:])


DEPLOY = '{"type":"deploy","kind":"%s","ranker":"r2","ts":1,"previous":"r1"%s}'
SHARE_ERROR = "must be a number strictly between 0 and 1, got "


@pytest.mark.parametrize(("kind", "share", "expected"), [
    ("canary_start", '0.05', 0.05),
    ("canary_start", '0.5', 0.5),
    ("canary_start", None, None),                     # optional on a canary's start
    ("canary_start", 'null', None),                   # null is absent
    ("canary_share", '0.2', 0.2),
    ("canary_share", None, ("share", "missing", "missing_field")),  # required on a change of share
    ("canary_share", 'null', ("share", "missing", "missing_field")),
    ("canary_start", '0', ("share", f"{SHARE_ERROR}0", "invalid_value")),
    ("canary_share", '1', ("share", f"{SHARE_ERROR}1", "invalid_value")),
    ("canary_start", '1.0', ("share", f"{SHARE_ERROR}1.0", "invalid_value")),
    ("canary_start", '-0.1', ("share", f"{SHARE_ERROR}-0.1", "invalid_value")),
    ("canary_share", '1.5', ("share", f"{SHARE_ERROR}1.5", "invalid_value")),
    ("canary_start", '1e999', ("share", f"{SHARE_ERROR}inf", "invalid_value")),  # no float holds it
    ("canary_start", '-1e999', ("share", f"{SHARE_ERROR}-inf", "invalid_value")),
    ("canary_start", 'NaN', ("", "invalid JSON: NaN is not a JSON number", "invalid_json")),
    ("canary_share", 'Infinity', ("", "invalid JSON: Infinity is not a JSON number", "invalid_json")),
    ("canary_start", '"0.5"', ("share", "expected a number, got str", "wrong_type")),
    ("canary_share", 'true', ("share", "expected a number, got bool", "wrong_type")),
    ("canary_start", '[0.5]', ("share", "expected a number, got list", "wrong_type")),
    ("deploy", '0.5', ("share", "a deploy event takes no share (only canary_start and canary_share do)",
                       "invalid_value")),
    ("canary_end", '0.5', ("share", "a canary_end event takes no share (only canary_start and canary_share do)",
                           "invalid_value")),
    ("rollback", '"x"', ("share", "a rollback event takes no share (only canary_start and canary_share do)",
                         "invalid_value")),
    ("rollback", 'null', None),
])
def test_a_deploys_share_agrees_with_the_reference(kind: str, share: str | None,
                                                    expected: float | tuple[str, ...] | None) -> None:
    """``share``: required on canary_share, optional on canary_start, refused on the other kinds; a number
    strictly between 0 and 1. Both paths give the same event or the reference's error."""
    raw = (DEPLOY % (kind, "" if share is None else f',"share":{share}')).encode()
    fast = agree(raw)
    got = outcome(decode_event, raw)
    if isinstance(expected, tuple):
        assert fast is None and got == expected
    else:
        assert fast is not None, raw  # a valid deploy takes the fast path
        assert got == Deploy(kind, "r2", 1.0, "r1", expected)


def test_escaped_surrogates_are_refused_by_the_fast_path_and_decided_by_the_reference() -> None:
    for escaped in (b"\\ud800", b"\\udc00x", b"\\uD83D"):
        raw = b'{"type":"deploy","kind":"deploy","ranker":"r' + escaped + b'","ts":1}'
        assert fast_decode(raw, FOUR_LEVEL_SCALE) is None
        assert outcome(decode_event, raw)[2] == "invalid_utf8"  # type: ignore[index]
    paired = b'{"type":"deploy","kind":"deploy","ranker":"r\\ud83d\\ude00","ts":1}'
    assert agree(paired) is not None


@pytest.mark.parametrize("length", [0, 1, 2, 3, 255, 256, 257, 300, 301])
def test_a_document_id_at_and_around_each_limit_agrees_with_the_reference(length: int) -> None:
    """msgspec refuses an empty id and one over the default limit while it decodes (the reference decides);
    with a lower limit the fast path checks it, with a higher one the reference takes the longer ids."""
    raw = json.dumps({"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 1.0,
                      "results": [{"doc_id": "d" * length, "position": 1}, {"doc_id": "e", "position": 2}]}
                     ).encode()
    for limits in (DEFAULT_LIMITS, Limits(max_id_chars=2), Limits(max_id_chars=300)):
        fast = agree(raw, FOUR_LEVEL_SCALE, limits)
        assert (fast is not None) == (1 <= length <= min(limits.max_id_chars, DEFAULT_LIMITS.max_id_chars))
    assert isinstance(outcome(decode_event, raw, FOUR_LEVEL_SCALE, Limits(max_id_chars=300)), Impression) == (
        1 <= length <= 300)


def test_an_impression_decoded_without_results_keeps_everything_counting_reads() -> None:
    """``without_results`` drops the results and the shadow lists' results, and nothing else."""
    raw = json.dumps({"type": "impression", "session_id": "s", "query": "q", "ranker": "r", "ts": 1e9,
                      "variant": "canary", "query_bucket": "tail",
                      "results": [{"doc_id": "a", "position": 2}, {"doc_id": "b", "position": 1}],
                      "shadow": [{"ranker": "r2", "results": [{"doc_id": "c", "position": 1}]}]}).encode()
    full = decode_event(raw, FOUR_LEVEL_SCALE)
    bare = decode_event(raw, FOUR_LEVEL_SCALE, results=False)
    assert isinstance(full, Impression) and isinstance(bare, Impression)
    assert [r.doc_id for r in full.results] == ["b", "a"] and bare.results == ()
    assert [s.ranker for s in bare.shadow] == ["r2"] and bare.shadow[0].results == ()
    assert msgspec.structs.replace(bare, results=full.results, shadow=full.shadow) == full
    # a result that fails its checks still refuses the impression when the results are not kept
    duplicate = raw.replace(b'"doc_id": "b"', b'"doc_id": "a"')
    with pytest.raises(EventError) as error:
        decode_event(duplicate, FOUR_LEVEL_SCALE, results=False)
    assert error.value.code == "duplicate_document"
