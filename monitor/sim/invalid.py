"""Malformed events, each with the rejection a validator must give.

Every kind starts from a valid event of the current session (its impression, a single or batched
annotation of it, or a deploy of its ranker) and breaks one thing: the bytes (truncated or non-JSON text,
invalid UTF-8, ``NaN``/``Infinity`` tokens), a type, a missing field, the positions (negative, duplicate,
missing, a gap), the limits (over 200 results, over 1,000 grades, ids over 256 characters), a grade, the
schema version or the event type. ``expected`` is a substring of the message of the
:class:`~monitor.core.events.EventError` that ``decode_event(raw, SEED_SCALE)`` raises: ``field: reason``,
or just the reason for errors about the whole value; ``code`` is the reason code of docs/events.md that
the dead-letter header ``monitor.error.code`` and ``search_relevance_dead_letters_total{reason}`` carry
(:data:`CODES`, written out by hand: a check of the codes the validator gives, not a copy of them).

:data:`KINDS` are what the simulator mixes into its stream (``SimConfig.invalid_rate``).
:data:`EXTRA_KINDS` (overflowing numbers, unpaired surrogate escapes, other encodings, values that are not
objects, deep nesting, more oversized strings, schema versions and wrong types) and :data:`MISROUTED`
(valid events on another type's topic) are used by the bad-input corpus only (:mod:`monitor.sim.corpus`):
adding them to the simulator's draw would change every seeded run's invalid records, and a misrouted
event is valid in a replay file, which has no topics.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.sim.records import encode, json_text


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


Broken = tuple[bytes, str]  # raw value, expected error substring
Breaker = Callable[[dict[str, Any], np.random.Generator], Broken]


def _pick(items: list[Any], rng: np.random.Generator, start: int = 0) -> int:
    return int(rng.integers(start, len(items))) if len(items) > start else start


def _with_token(obj: dict[str, Any], token: bytes) -> bytes:
    return encode(obj).replace(b'"__TOKEN__"', token)


# impressions ---------------------------------------------------------------------------------------------

def _truncated(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    text = encode(obj).decode("utf-8")
    return text[: int(rng.integers(1, len(text) - 1))].encode("utf-8"), "invalid JSON"


def _plain_text(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return f"impression {obj['session_id']} {obj['query']}".encode(), "invalid JSON"


def _bad_utf8(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    raw = encode(obj)
    query = obj["query"].encode("utf-8")
    return raw.replace(query, query[:1] + b"\xff\xfe" + query[1:], 1), "not UTF-8"


def _array(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode({"events": [obj]})[len(b'{"events":'):-1], "expected a JSON object, got list"


def _constant_score(token: bytes) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj["results"][_pick(obj["results"], rng)]["score"] = "__TOKEN__"
        return _with_token(obj, token), f"invalid JSON: {token.decode()} is not a JSON number"
    return breaker


def _set(field: str, value: Any, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = value
        return encode(obj), expected
    return breaker


def _drop(field: str, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        del obj[field]
        return encode(obj), expected
    return breaker


def _result_field(field: str, value: Any, reason: str, prefixed: bool = True) -> Breaker:
    """Set one result's field; ``prefixed=False`` where the validator names the field without its path."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["results"], rng)
        obj["results"][j][field] = value
        return encode(obj), f"results[{j}].{field}: {reason}" if prefixed else f"{field}: {reason}"
    return breaker


def _two_results(obj: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = obj["results"]
    if len(results) < 2:
        results.append({"doc_id": results[0]["doc_id"] + "-extra", "position": 2, "score": 0.0})
    return results


def _duplicate_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = _two_results(obj)
    j = _pick(results, rng, start=1)
    results[j]["position"] = results[j - 1]["position"]
    return encode(obj), f"results[{j}].position: duplicate position"


def _missing_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    del obj["results"][j]["position"]
    return encode(obj), f"results[{j}].position: missing"


def _gap_in_positions(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = obj["results"]
    for item in results[_pick(results, rng):]:
        item["position"] += 1
    return encode(obj), f"results: positions must be 1..{len(results)}; missing"


def _duplicate_doc(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    results = _two_results(obj)
    j = _pick(results, rng, start=1)
    results[j]["doc_id"] = results[j - 1]["doc_id"]
    return encode(obj), f"results[{j}].doc_id: document shown twice in one session"


def _too_many_results(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(201, 260))
    base = obj["results"][0]["doc_id"]
    obj["results"] = [{"doc_id": f"{base}-{i}", "position": i, "score": 0.5} for i in range(1, n + 1)]
    return encode(obj), f"results: {n} results, more than the limit of 200"


def _long_id(n: int) -> str:
    return "x" * n


def _number(field: str, token: bytes, expected: str) -> Breaker:
    """A top-level field set to a JSON number no float holds (``1e999``, a 400-digit integer)."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = "__TOKEN__"
        return _with_token(obj, token), expected
    return breaker


def _score_token(token: bytes, shown: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["results"], rng)
        obj["results"][j]["score"] = "__TOKEN__"
        return _with_token(obj, token), f"results[{j}].score: not a finite number: {shown}"
    return breaker


_HUGE_INTEGER = b"1" + b"0" * 400


def _unpaired_surrogate(field: str, escape: str) -> Breaker:
    """A ``\\udXXX`` escape that is not half of a pair appended to a top-level string: valid JSON whose
    string no UTF-8 encoder takes."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        text = obj[field]
        obj[field] = "__TOKEN__"
        token = (json_text(text)[:-1] + escape + '"').encode("utf-8")
        return _with_token(obj, token), f"{field}: not UTF-8 (unpaired surrogate {escape}"
    return breaker


def _surrogate_doc_id(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    doc = obj["results"][j]["doc_id"]
    obj["results"][j]["doc_id"] = "__TOKEN__"
    token = (json_text(doc)[:-1] + '\\udc00"').encode("utf-8")
    return _with_token(obj, token), f"results[{j}].doc_id: not UTF-8 (unpaired surrogate \\udc00"


def _utf16(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode(obj).decode("utf-8").encode("utf-16"), "not UTF-8"


def _overlong(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    """The query's first character replaced by ``/`` in a two-byte (overlong) encoding, never valid UTF-8."""
    raw, query = encode(obj), obj["query"].encode("utf-8")
    return raw.replace(query, b"\xc0\xaf" + query, 1), "not UTF-8"


def _bom(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return b"\xef\xbb\xbf" + encode(obj), "invalid JSON: Unexpected UTF-8 BOM"


def _raw(value: bytes, expected: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        return value, expected
    return breaker


def _concatenated(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode(obj) * 2, "invalid JSON: Extra data"


def _trailing_brace(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    return encode(obj) + b"}", "invalid JSON: Extra data"


def _deeply_nested(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    depth = int(rng.integers(2_000, 20_000))
    obj["extra"] = "__TOKEN__"
    return _with_token(obj, b"[" * depth + b"]" * depth), "invalid JSON: nested too deeply"


def _long_text(field: str, limit: int, low: int, high: int, char: str = "x") -> Breaker:
    """A string field ``low..high`` characters long (``char`` repeated), over its ``limit``."""
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        obj[field] = char * int(rng.integers(low, high))
        return encode(obj), f"{field}: longer than {limit} characters ({len(obj[field])})"
    return breaker


def _future_schema(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    version = int(rng.integers(3, 1000))
    obj["schema"] = version
    return encode(obj), f"schema: unknown schema version {version}"


def _result_item_string(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    obj["results"][j] = obj["results"][j]["doc_id"]
    return encode(obj), f"results[{j}]: expected an object"


def _grade_item_string(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["grades"], rng)
    obj["grades"][j] = obj["grades"][j]["grade"]
    return encode(obj), f"grades[{j}]: expected an object"


def _grades_object(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["grades"] = {item["doc_id"]: item["grade"] for item in obj["grades"]}
    return encode(obj), "grades: expected a non-empty list"


def _huge_position(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["results"], rng)
    obj["results"][j]["position"] = 10**30
    return encode(obj), f"results: positions must be 1..{len(obj['results'])}; missing"


def _far_too_many_results(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(1_000, 3_000))
    base = obj["results"][0]["doc_id"]
    obj["results"] = [{"doc_id": f"{base}-{i}", "position": i} for i in range(1, n + 1)]
    return encode(obj), f"results: {n} results, more than the limit of 200"


# annotations ---------------------------------------------------------------------------------------------

def _batch_grade(value: Any, reason: str) -> Breaker:
    def breaker(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
        j = _pick(obj["grades"], rng)
        obj["grades"][j]["grade"] = value
        return encode(obj), f"grades[{j}].grade: {reason}"
    return breaker


def _batch_long_doc(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    j = _pick(obj["grades"], rng)
    obj["grades"][j]["doc_id"] = _long_id(300)
    return encode(obj), f"grades[{j}].doc_id: longer than 256 characters"


def _too_many_grades(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    n = int(rng.integers(1001, 1100))
    obj["grades"] = [{"doc_id": f"d-x-{i}", "grade": "低"} for i in range(n)]
    return encode(obj), f"grades: {n} grades, more than the limit of 1000"


def _both_targets(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["query"] = "蓝牙耳机"
    return encode(obj), "session_id: an annotation needs exactly one of session_id and query"


def _single_and_batch(obj: dict[str, Any], rng: np.random.Generator) -> Broken:
    obj["grades"] = [{"doc_id": obj["doc_id"], "grade": obj["grade"]}]
    return encode(obj), "grades: give either doc_id and grade, or grades, not both"


_MISSING_TARGET = "session_id: an annotation needs exactly one of session_id and query"

KINDS: dict[str, tuple[str, Breaker]] = {
    # raw bytes
    "truncated_json": ("impression", _truncated),
    "plain_text": ("impression", _plain_text),
    "invalid_utf8": ("impression", _bad_utf8),
    "json_array": ("impression", _array),
    "nan_score": ("impression", _constant_score(b"NaN")),
    "infinity_score": ("impression", _constant_score(b"Infinity")),
    "negative_infinity_score": ("impression", _constant_score(b"-Infinity")),
    # envelope
    "unknown_schema": ("impression", _set("schema", 2, "schema: unknown schema version 2")),
    "string_schema": ("single", _set("schema", "1", "schema: unknown schema version '1'")),
    "unknown_type": ("impression", _set("type", "click", "type: unknown event type 'click'")),
    "missing_type": ("single", _drop("type", "type: unknown event type None")),
    # impression fields
    "session_id_number": ("impression", _set("session_id", 1842, "session_id: expected a string, got int")),
    "query_list": ("impression", _set("query", ["蓝牙耳机"], "query: expected a string, got list")),
    "missing_query": ("impression", _drop("query", "query: missing")),
    "missing_session_id": ("impression", _drop("session_id", "session_id: missing")),
    "empty_ranker": ("impression", _set("ranker", "  ", "ranker: empty")),
    "oversized_session_id": ("impression", _set("session_id", _long_id(257),
                                                "session_id: longer than 256 characters (257)")),
    "unknown_bucket": ("impression", _set("query_bucket", "mid", "query_bucket: 'mid' is not one of")),
    "missing_ts": ("impression", _drop("ts", "ts: missing")),
    "negative_ts": ("impression", _set("ts", -5.0, "ts: not a valid epoch time: -5.0")),
    "naive_ts": ("impression", _set("ts", "2025-11-21T08:00:00", "ts: ISO-8601 time without a time zone")),
    "garbled_ts": ("impression", _set("ts", "yesterday", "ts: not an ISO-8601 time")),
    "boolean_ts": ("impression", _set("ts", True, "ts: expected epoch seconds or an ISO-8601 time, "
                                                  "got a boolean")),
    "missing_results": ("impression", _drop("results", "results: missing")),
    "results_string": ("impression", _set("results", "d-1,d-2", "results: expected a list")),
    "empty_results": ("impression", _set("results", [], "results: empty list")),
    "too_many_results": ("impression", _too_many_results),
    "negative_position": ("impression", _result_field("position", -1, "position must be ≥ 1, got -1")),
    "zero_position": ("impression", _result_field("position", 0, "position must be ≥ 1, got 0")),
    "float_position": ("impression", _result_field("position", 1.5, "expected an integer")),
    "duplicate_position": ("impression", _duplicate_position),
    "missing_position": ("impression", _missing_position),
    "gap_in_positions": ("impression", _gap_in_positions),
    "duplicate_doc": ("impression", _duplicate_doc),
    "oversized_doc_id": ("impression", _result_field("doc_id", _long_id(300), "longer than 256 characters",
                                                         prefixed=False)),
    "doc_id_number": ("impression", _result_field("doc_id", 17, "expected a string, got int",
                                                  prefixed=False)),
    "string_score": ("impression", _result_field("score", "0.93", "expected a number")),
    "boolean_score": ("impression", _result_field("score", False, "expected a number")),
    # annotations
    "unknown_grade_name": ("single", _set("grade", "很好", "grade: unknown grade '很好'")),
    "unknown_grade_level": ("single", _set("grade", 7, "grade: unknown grade 7")),
    "fractional_grade": ("single", _set("grade", 2.5, "grade: unknown grade 2.5")),
    "boolean_grade": ("single", _set("grade", True, "grade: expected a grade name or number")),
    "missing_grade": ("single", _drop("grade", "grade: missing")),
    "missing_doc_id": ("single", _drop("doc_id", "doc_id: missing")),
    "no_target": ("single", _drop("session_id", _MISSING_TARGET)),
    "both_targets": ("single", _both_targets),
    "single_and_batch": ("single", _single_and_batch),
    "unknown_grade_in_batch": ("batch", _batch_grade("perfect", "unknown grade 'perfect'")),
    "oversized_grade_doc_id": ("batch", _batch_long_doc),
    "empty_batch": ("batch", _set("grades", [], "grades: expected a non-empty list")),
    "too_many_grades": ("batch", _too_many_grades),
    # deploys
    "unknown_deploy_kind": ("deploy", _set("kind", "launch", "kind: 'launch' is not one of")),
    "missing_ranker": ("deploy", _drop("ranker", "ranker: missing")),
    "deploy_missing_ts": ("deploy", _drop("ts", "ts: missing")),
}

EXTRA_KINDS: dict[str, tuple[str, Breaker]] = {
    # numbers no float holds: JSON allows them, the schema's "finite number" does not
    "overflow_score": ("impression", _score_token(b"1e999", "inf")),
    "negative_overflow_score": ("impression", _score_token(b"-1e999", "-inf")),
    "huge_integer_score": ("impression", _score_token(_HUGE_INTEGER, "1000")),
    "overflow_ts": ("impression", _number("ts", b"1e999", "ts: not a valid epoch time: inf")),
    "huge_integer_ts": ("impression", _number("ts", _HUGE_INTEGER, "ts: not a valid epoch time: 1000")),
    "huge_integer_grade": ("single", _number("grade", _HUGE_INTEGER, "grade: unknown grade 1000")),
    # encodings
    "unpaired_surrogate_query": ("impression", _unpaired_surrogate("query", "\\ud800")),
    "unpaired_surrogate_doc_id": ("impression", _surrogate_doc_id),
    "unpaired_surrogate_session_id": ("single", _unpaired_surrogate("session_id", "\\udbff")),
    "utf16": ("impression", _utf16),
    "overlong_utf8": ("impression", _overlong),
    "utf8_bom": ("single", _bom),
    # not one JSON object
    "empty_value": ("impression", _raw(b"", "invalid JSON: an empty message")),
    "json_string": ("single", _raw(b'"annotation"', "expected a JSON object, got str")),
    "json_null": ("single", _raw(b"null", "expected a JSON object, got NoneType")),
    "json_number": ("deploy", _raw(b"42", "expected a JSON object, got int")),
    "concatenated": ("single", _concatenated),
    "trailing_brace": ("impression", _trailing_brace),
    "deeply_nested": ("impression", _deeply_nested),
    # oversized strings
    "oversized_query": ("impression", _long_text("query", 1024, 1025, 5000)),
    "huge_query": ("impression", _long_text("query", 1024, 40_000, 60_000, "蓝")),
    "oversized_ranker": ("impression", _long_text("ranker", 256, 257, 2000)),
    "oversized_variant": ("impression", _long_text("variant", 256, 257, 2000)),
    "oversized_annotation_session_id": ("single", _long_text("session_id", 256, 257, 2000)),
    "oversized_previous": ("deploy", _long_text("previous", 256, 257, 2000)),
    # schema versions and types
    "future_schema": ("batch", _future_schema),
    "null_schema": ("impression", _set("schema", None, "schema: unknown schema version None")),
    "deploy_unknown_schema": ("deploy", _set("schema", 2, "schema: unknown schema version 2")),
    "plural_type": ("impression", _set("type", "impressions", "type: unknown event type 'impressions'")),
    "result_not_object": ("impression", _result_item_string),
    "grade_not_object": ("batch", _grade_item_string),
    "grades_object": ("batch", _grades_object),
    "ts_list": ("impression", _set("ts", [1763712000], "ts: expected epoch seconds or an ISO-8601 time, "
                                                      "got list")),
    "variant_number": ("impression", _set("variant", 7, "variant: expected a string, got int")),
    "deploy_ranker_number": ("deploy", _set("ranker", 2, "ranker: expected a string, got int")),
    "null_grade": ("single", _set("grade", None, "grade: missing")),
    "negative_grade": ("single", _set("grade", -1, "grade: unknown grade -1")),
    # positions and limits
    "string_position": ("impression", _result_field("position", "1", "expected an integer")),
    "huge_position": ("impression", _huge_position),
    "far_too_many_results": ("impression", _far_too_many_results),
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
