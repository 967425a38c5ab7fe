"""Malformed events, each with the rejection a validator must give.

Every kind starts from a valid event of the current session (its impression, a single or batched
annotation of it, or a deploy of its ranker) and breaks one thing: the bytes (truncated or non-JSON text,
invalid UTF-8, ``NaN``/``Infinity`` tokens), a type, a missing field, the positions (negative, duplicate,
missing, a gap), the limits (over 200 results, over 1,000 grades, ids over 256 characters), a grade, the
schema version or the event type. ``expected`` is a substring of the message of the
:class:`~monitor.core.events.EventError` that ``decode_event(raw, FOUR_LEVEL_SCALE)`` raises:
``field: reason``, or just the reason for errors about the whole value; ``code`` is the reason code of
docs/events.md that the dead-letter header ``monitor.error.code`` and
``search_relevance_dead_letters_total{reason}`` carry (:data:`CODES`, written out by hand: a check of the
codes the validator gives, not a copy of them).

:data:`KINDS` are what the simulator mixes into its stream (``SimConfig.invalid_rate``).
:data:`EXTRA_KINDS` (overflowing numbers, unpaired surrogate escapes, other encodings, values that are not
objects, deep nesting, more oversized strings, schema versions and wrong types, bad shadow lists) and
:data:`MISROUTED`
(valid events on another type's topic) are used by the bad-input corpus only (:mod:`monitor.sim.corpus`):
adding them to the simulator's draw would change every seeded run's invalid records, and a misrouted
event is valid in a replay file, which has no topics.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

import monitor.sim.breakers as b
from monitor.sim.breakers import Breaker, Broken
from monitor.sim.records import encode


@dataclass(frozen=True, slots=True)
class Bases:
    """Valid events of one session to break (never modified: kinds work on copies)."""

    impression: dict[str, Any]
    single: dict[str, Any]
    batch: dict[str, Any]
    deploy: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Malformed:
    kind: str
    topic: str
    key: bytes
    value: bytes
    expected: str
    code: str


_MISSING_TARGET = "session_id: an annotation needs exactly one of session_id and query"

KINDS: dict[str, tuple[str, Breaker]] = {
    # raw bytes
    "truncated_json": ("impression", b.truncated),
    "plain_text": ("impression", b.plain_text),
    "invalid_utf8": ("impression", b.bad_utf8),
    "json_array": ("impression", b.array),
    "nan_score": ("impression", b.constant_score(b"NaN")),
    "infinity_score": ("impression", b.constant_score(b"Infinity")),
    "negative_infinity_score": ("impression", b.constant_score(b"-Infinity")),
    # envelope
    "unknown_schema": ("impression", b.put("schema", 2, "schema: unknown schema version 2")),
    "string_schema": ("single", b.put("schema", "1", "schema: unknown schema version '1'")),
    "unknown_type": ("impression", b.put("type", "click", "type: unknown event type 'click'")),
    "missing_type": ("single", b.drop("type", "type: unknown event type None")),
    # impression fields
    "session_id_number": ("impression", b.put("session_id", 1842, "session_id: expected a string, got int")),
    "query_list": ("impression", b.put("query", ["蓝牙耳机"], "query: expected a string, got list")),
    "missing_query": ("impression", b.drop("query", "query: missing")),
    "missing_session_id": ("impression", b.drop("session_id", "session_id: missing")),
    "empty_ranker": ("impression", b.put("ranker", "  ", "ranker: empty")),
    "oversized_session_id": ("impression", b.put("session_id", b.long_id(257),
                                                "session_id: longer than 256 characters (257)")),
    "unknown_bucket": ("impression", b.put("query_bucket", "mid", "query_bucket: 'mid' is not one of")),
    "missing_ts": ("impression", b.drop("ts", "ts: missing")),
    "negative_ts": ("impression", b.put("ts", -5.0, "ts: not a valid epoch time: -5.0")),
    "naive_ts": ("impression", b.put("ts", "2025-11-21T08:00:00", "ts: ISO-8601 time without a time zone")),
    "garbled_ts": ("impression", b.put("ts", "yesterday", "ts: not an ISO-8601 time")),
    "boolean_ts": ("impression", b.put("ts", True, "ts: expected epoch seconds or an ISO-8601 time, "
                                                  "got a boolean")),
    "missing_results": ("impression", b.drop("results", "results: missing")),
    "results_string": ("impression", b.put("results", "d-1,d-2", "results: expected a list")),
    "empty_results": ("impression", b.put("results", [], "results: empty list")),
    "too_many_results": ("impression", b.too_many_results),
    "negative_position": ("impression", b.result_field("position", -1, "position must be ≥ 1, got -1")),
    "zero_position": ("impression", b.result_field("position", 0, "position must be ≥ 1, got 0")),
    "float_position": ("impression", b.result_field("position", 1.5, "expected an integer")),
    "duplicate_position": ("impression", b.repeated("position", "duplicate position")),
    "missing_position": ("impression", b.missing_position),
    "gap_in_positions": ("impression", b.gap_in_positions),
    "duplicate_doc": ("impression", b.repeated("doc_id", "document shown twice in one session")),
    "oversized_doc_id": ("impression", b.result_field("doc_id", b.long_id(300), "longer than 256 characters",
                                                         prefixed=False)),
    "doc_id_number": ("impression", b.result_field("doc_id", 17, "expected a string, got int",
                                                  prefixed=False)),
    "string_score": ("impression", b.result_field("score", "0.93", "expected a number")),
    "boolean_score": ("impression", b.result_field("score", False, "expected a number")),
    # annotations
    "unknown_grade_name": ("single", b.put("grade", "很好", "grade: unknown grade '很好'")),
    "unknown_grade_level": ("single", b.put("grade", 7, "grade: unknown grade 7")),
    "fractional_grade": ("single", b.put("grade", 2.5, "grade: unknown grade 2.5")),
    "boolean_grade": ("single", b.put("grade", True, "grade: expected a grade name or number")),
    "missing_grade": ("single", b.drop("grade", "grade: missing")),
    "missing_doc_id": ("single", b.drop("doc_id", "doc_id: missing")),
    "no_target": ("single", b.drop("session_id", _MISSING_TARGET)),
    "both_targets": ("single", b.both_targets),
    "single_and_batch": ("single", b.single_and_batch),
    "unknown_grade_in_batch": ("batch", b.batch_grade("perfect", "unknown grade 'perfect'")),
    "oversized_grade_doc_id": ("batch", b.batch_long_doc),
    "empty_batch": ("batch", b.put("grades", [], "grades: expected a non-empty list")),
    "too_many_grades": ("batch", b.too_many_grades),
    # deploys
    "unknown_deploy_kind": ("deploy", b.put("kind", "launch", "kind: 'launch' is not one of")),
    "missing_ranker": ("deploy", b.drop("ranker", "ranker: missing")),
    "deploy_missing_ts": ("deploy", b.drop("ts", "ts: missing")),
}

EXTRA_KINDS: dict[str, tuple[str, Breaker]] = {
    # numbers no float holds: JSON allows them, the schema's "finite number" does not
    "overflow_score": ("impression", b.score_token(b"1e999", "inf")),
    "negative_overflow_score": ("impression", b.score_token(b"-1e999", "-inf")),
    "huge_integer_score": ("impression", b.score_token(b.HUGE_INTEGER, "1000")),
    "overflow_ts": ("impression", b.number("ts", b"1e999", "ts: not a valid epoch time: inf")),
    "huge_integer_ts": ("impression", b.number("ts", b.HUGE_INTEGER, "ts: not a valid epoch time: 1000")),
    "huge_integer_grade": ("single", b.number("grade", b.HUGE_INTEGER, "grade: unknown grade 1000")),
    # encodings
    "unpaired_surrogate_query": ("impression", b.unpaired_surrogate("query", "\\ud800")),
    "unpaired_surrogate_doc_id": ("impression", b.surrogate_doc_id),
    "unpaired_surrogate_session_id": ("single", b.unpaired_surrogate("session_id", "\\udbff")),
    "utf16": ("impression", b.utf16),
    "overlong_utf8": ("impression", b.overlong),
    "utf8_bom": ("single", b.bom),
    # not one JSON object
    "empty_value": ("impression", b.raw(b"", "invalid JSON: an empty message")),
    "json_string": ("single", b.raw(b'"annotation"', "expected a JSON object, got str")),
    "json_null": ("single", b.raw(b"null", "expected a JSON object, got NoneType")),
    "json_number": ("deploy", b.raw(b"42", "expected a JSON object, got int")),
    "concatenated": ("single", b.concatenated),
    "trailing_brace": ("impression", b.trailing_brace),
    "deeply_nested": ("impression", b.deeply_nested),
    # oversized strings
    "oversized_query": ("impression", b.long_text("query", 1024, 1025, 5000)),
    "huge_query": ("impression", b.long_text("query", 1024, 40_000, 60_000, "蓝")),
    "oversized_ranker": ("impression", b.long_text("ranker", 256, 257, 2000)),
    "oversized_variant": ("impression", b.long_text("variant", 256, 257, 2000)),
    "oversized_annotation_session_id": ("single", b.long_text("session_id", 256, 257, 2000)),
    "oversized_previous": ("deploy", b.long_text("previous", 256, 257, 2000)),
    # schema versions and types
    "future_schema": ("batch", b.future_schema),
    "null_schema": ("impression", b.put("schema", None, "schema: unknown schema version None")),
    "deploy_unknown_schema": ("deploy", b.put("schema", 2, "schema: unknown schema version 2")),
    "plural_type": ("impression", b.put("type", "impressions", "type: unknown event type 'impressions'")),
    "result_not_object": ("impression", b.result_item_string),
    "grade_not_object": ("batch", b.grade_item_string),
    "grades_object": ("batch", b.grades_object),
    "ts_list": ("impression", b.put("ts", [1763712000], "ts: expected epoch seconds or an ISO-8601 time, "
                                                      "got list")),
    "variant_number": ("impression", b.put("variant", 7, "variant: expected a string, got int")),
    "deploy_ranker_number": ("deploy", b.put("ranker", 2, "ranker: expected a string, got int")),
    "null_grade": ("single", b.put("grade", None, "grade: missing")),
    "negative_grade": ("single", b.put("grade", -1, "grade: unknown grade -1")),
    # positions and limits
    "string_position": ("impression", b.result_field("position", "1", "expected an integer")),
    "huge_position": ("impression", b.huge_position),
    "far_too_many_results": ("impression", b.far_too_many_results),
    # shadow lists: each checked as the impression's results, under another ranker
    "shadow_string": ("impression", b.put("shadow", "ranker-2", "shadow: expected a list, got str")),
    "shadow_object": ("impression", b.put("shadow", {"ranker": "r"}, "shadow: expected a list, got dict")),
    "shadow_not_object": ("impression", b.put("shadow", ["ranker-2"], "shadow[0]: expected an object")),
    "too_many_shadow_lists": ("impression", b.too_many_shadow_lists),
    "shadow_of_own_ranker": ("impression", b.shadow_of_own_ranker),
    "repeated_shadow_ranker": ("impression", b.repeated_shadow_ranker),
    "shadow_missing_ranker": ("impression", b.in_shadow(b.drop("ranker", "ranker: missing"))),
    "shadow_empty_ranker": ("impression", b.in_shadow(b.put("ranker", " ", "ranker: empty"), lists=2)),
    "oversized_shadow_ranker": ("impression", b.in_shadow(b.put("ranker", b.long_id(257),
                                                                  "ranker: longer than 256 characters"))),
    "shadow_missing_results": ("impression", b.in_shadow(b.drop("results", "results: missing"))),
    "shadow_empty_results": ("impression", b.in_shadow(b.put("results", [], "results: empty list"), lists=3)),
    "shadow_too_many_results": ("impression", b.in_shadow(b.too_many_results)),
    "shadow_zero_position": ("impression", b.in_shadow(b.result_field("position", 0,
                                                                      "position must be ≥ 1, got 0"))),
    "shadow_duplicate_position": ("impression", b.in_shadow(b.repeated("position", "duplicate position"))),
    "shadow_gap_in_positions": ("impression", b.in_shadow(b.gap_in_positions, lists=2)),
    "shadow_duplicate_doc": ("impression", b.in_shadow(b.repeated("doc_id", "document shown twice"))),
    "shadow_doc_id_number": ("impression", b.in_shadow(b.result_field("doc_id", 17, "expected a string"))),
    "shadow_string_score": ("impression", b.in_shadow(b.result_field("score", "0.9", "expected a number"))),
    "shadow_float_position": ("impression", b.in_shadow(b.result_field("position", 2.5,
                                                                       "expected an integer"), lists=4)),
}


def _unchanged(expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        return encode(obj), expected
    return breaker


def _wrong_topic(kind: str, topic: str) -> str:
    takes = {"impressions": "impression", "annotations": "annotation", "deploys": "deploy"}[topic]
    return f"type: {kind} event on the wrong topic ({topic} takes {takes})"


# valid events on another type's topic: kind -> (base, the topic it is sent to)
MISROUTED: dict[str, tuple[str, str]] = {
    "impression_on_annotations": ("impression", "annotations"),
    "impression_on_deploys": ("impression", "deploys"),
    "annotation_on_impressions": ("single", "impressions"),
    "annotation_on_deploys": ("batch", "deploys"),
    "deploy_on_impressions": ("deploy", "impressions"),
    "deploy_on_annotations": ("deploy", "annotations"),
}
_MISROUTED_BREAKERS: dict[str, tuple[str, Breaker]] = {
    kind: (base, _unchanged(_wrong_topic("deploy" if base == "deploy" else
                                         "impression" if base == "impression" else "annotation", topic)))
    for kind, (base, topic) in MISROUTED.items()
}

_ALL_KINDS = {**KINDS, **EXTRA_KINDS, **_MISROUTED_BREAKERS}

# The reason code of every kind (docs/events.md), as a reader of the schema would expect it.
CODES: dict[str, str] = {
    # KINDS
    "truncated_json": "invalid_json", "plain_text": "invalid_json", "invalid_utf8": "invalid_utf8",
    "json_array": "wrong_type", "nan_score": "invalid_json", "infinity_score": "invalid_json",
    "negative_infinity_score": "invalid_json", "unknown_schema": "unknown_schema",
    "string_schema": "unknown_schema", "unknown_type": "unknown_type", "missing_type": "unknown_type",
    "session_id_number": "wrong_type", "query_list": "wrong_type", "missing_query": "missing_field",
    "missing_session_id": "missing_field", "empty_ranker": "invalid_value",
    "oversized_session_id": "oversized", "unknown_bucket": "invalid_value", "missing_ts": "missing_field",
    "negative_ts": "invalid_value", "naive_ts": "invalid_value", "garbled_ts": "invalid_value",
    "boolean_ts": "wrong_type", "missing_results": "missing_field", "results_string": "wrong_type",
    "empty_results": "invalid_value", "too_many_results": "too_many_items",
    "negative_position": "bad_position", "zero_position": "bad_position", "float_position": "wrong_type",
    "duplicate_position": "bad_position", "missing_position": "missing_field",
    "gap_in_positions": "bad_position", "duplicate_doc": "duplicate_document",
    "oversized_doc_id": "oversized", "doc_id_number": "wrong_type", "string_score": "wrong_type",
    "boolean_score": "wrong_type", "unknown_grade_name": "unknown_grade",
    "unknown_grade_level": "unknown_grade", "fractional_grade": "unknown_grade",
    "boolean_grade": "wrong_type", "missing_grade": "missing_field", "missing_doc_id": "missing_field",
    "no_target": "invalid_value", "both_targets": "invalid_value", "single_and_batch": "invalid_value",
    "unknown_grade_in_batch": "unknown_grade", "oversized_grade_doc_id": "oversized",
    "empty_batch": "wrong_type", "too_many_grades": "too_many_items", "unknown_deploy_kind": "invalid_value",
    "missing_ranker": "missing_field", "deploy_missing_ts": "missing_field",
    # EXTRA_KINDS
    "overflow_score": "non_finite", "negative_overflow_score": "non_finite",
    "huge_integer_score": "non_finite", "overflow_ts": "invalid_value", "huge_integer_ts": "invalid_value",
    "huge_integer_grade": "unknown_grade", "unpaired_surrogate_query": "invalid_utf8",
    "unpaired_surrogate_doc_id": "invalid_utf8", "unpaired_surrogate_session_id": "invalid_utf8",
    "utf16": "invalid_utf8", "overlong_utf8": "invalid_utf8", "utf8_bom": "invalid_json",
    "empty_value": "invalid_json", "json_string": "wrong_type", "json_null": "wrong_type",
    "json_number": "wrong_type", "concatenated": "invalid_json", "trailing_brace": "invalid_json",
    "deeply_nested": "invalid_json", "oversized_query": "oversized", "huge_query": "oversized",
    "oversized_ranker": "oversized", "oversized_variant": "oversized",
    "oversized_annotation_session_id": "oversized", "oversized_previous": "oversized",
    "future_schema": "unknown_schema", "null_schema": "unknown_schema",
    "deploy_unknown_schema": "unknown_schema", "plural_type": "unknown_type",
    "result_not_object": "wrong_type", "grade_not_object": "wrong_type", "grades_object": "wrong_type",
    "ts_list": "wrong_type", "variant_number": "wrong_type", "deploy_ranker_number": "wrong_type",
    "null_grade": "missing_field", "negative_grade": "unknown_grade", "string_position": "wrong_type",
    "huge_position": "bad_position", "far_too_many_results": "too_many_items",
    "shadow_string": "wrong_type", "shadow_object": "wrong_type", "shadow_not_object": "wrong_type",
    "too_many_shadow_lists": "too_many_items", "shadow_of_own_ranker": "duplicate_ranker",
    "repeated_shadow_ranker": "duplicate_ranker", "shadow_missing_ranker": "missing_field",
    "shadow_empty_ranker": "invalid_value", "oversized_shadow_ranker": "oversized",
    "shadow_missing_results": "missing_field", "shadow_empty_results": "invalid_value",
    "shadow_too_many_results": "too_many_items", "shadow_zero_position": "bad_position",
    "shadow_duplicate_position": "bad_position", "shadow_gap_in_positions": "bad_position",
    "shadow_duplicate_doc": "duplicate_document", "shadow_doc_id_number": "wrong_type",
    "shadow_string_score": "wrong_type", "shadow_float_position": "wrong_type",
    # MISROUTED
    **{kind: "wrong_topic" for kind in MISROUTED},
}

_TOPICS = {"impression": "impressions", "single": "annotations", "batch": "annotations", "deploy": "deploys"}


def base_key(base_name: str, base: dict[str, Any]) -> bytes:
    """The key docs/events.md gives the base event: its ranker for a deploy, else its session id."""
    return str(base.get("ranker") if base_name == "deploy" else base.get("session_id", "")).encode("utf-8")


def malformed(kind: str, bases: Bases, rng: np.random.Generator) -> Malformed:
    """Break a copy of the base event that ``kind`` (of :data:`KINDS`, :data:`EXTRA_KINDS` or
    :data:`MISROUTED`) starts from."""
    base_name, breaker = _ALL_KINDS[kind]
    base: dict[str, Any] = getattr(bases, base_name)
    value, expected = breaker(copy.deepcopy(base), rng)
    topic = MISROUTED[kind][1] if kind in MISROUTED else _TOPICS[base_name]
    return Malformed(kind, topic, base_key(base_name, base), value, expected, CODES[kind])
