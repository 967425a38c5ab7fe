"""Which topic and key a raw event value goes to, read from its top-level fields only.

A file of events (``monitor replay``, ``monitor evaluate --sessions``) has no topics: each line's topic
follows from its ``type`` (``impression`` → ``impressions``, ``annotation`` → ``annotations``,
``deploy`` → ``deploys``) and its key from its ``session_id``, else ``query``, else ``ranker``, as a
producer keys them. Routing reads only those top-level fields, so whatever else is wrong with the
line (a field nested 10,000 deep, an integer of 5,000 digits, a lone surrogate ``"\\ud800"``, an
unknown grade) is left to :func:`monitor.core.decoding.decode_event`, as the worker leaves it: the
line becomes the worker's dead letter, with its reason, never a traceback.

A line is an event to route when it is one complete JSON object (its braces and strings closed,
nothing after it) whose top-level ``type`` is a known event type; anything else is a
:class:`ValueError` naming why (the caller's ``FILE:LINE: reason``). Valid lines take msgspec's C
decoder; the rest are scanned without recursion.

>>> route(b'{"type":"deploy","kind":"deploy","ranker":"r1","ts":1}')
('deploys', b'r1')
>>> route(b'{"type":"impression","session_id":"s-1","x":' + b'[' * 10_000 + b']' * 10_000 + b'}')
('impressions', b's-1')
>>> route(b'{"type":"click"}')
Traceback (most recent call last):
...
ValueError: unknown event type 'click' (expected impression, annotation or deploy)
"""

from __future__ import annotations

import json
import re

import msgspec

TOPIC_OF_TYPE = {"impression": "impressions", "annotation": "annotations", "deploy": "deploys"}
KEY_FIELDS = ("session_id", "query", "ranker")
_NOT_TEXT = object()  # a top-level field whose value is not a string


class _Fields(msgspec.Struct):
    type: msgspec.Raw = msgspec.Raw(b"null")
    session_id: msgspec.Raw = msgspec.Raw(b"null")
    query: msgspec.Raw = msgspec.Raw(b"null")
    ranker: msgspec.Raw = msgspec.Raw(b"null")


_DECODER = msgspec.json.Decoder(_Fields)
_TEXT = msgspec.json.Decoder(str)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_KEY = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:\s*', re.S)
_SPECIAL = re.compile(r'[",\[\]{}]')
_SPACE = re.compile(r"\s*")


def route(raw: bytes) -> tuple[str, bytes]:
    """Topic and key of one raw event value; ValueError (the reason) if it is not an event to route."""
    fields = _fast(raw)
    if fields is None:
        fields = _scan(raw.decode("utf-8", errors="replace"))  # bad UTF-8 is the validator's to report
    kind = fields.get("type")
    if not isinstance(kind, str) or kind not in TOPIC_OF_TYPE:
        shown = None if kind is _NOT_TEXT else kind
        raise ValueError(f"unknown event type {shown!r} (expected impression, annotation or deploy)")
    for name in KEY_FIELDS:
        value = fields.get(name)
        if isinstance(value, str):  # a lone surrogate is kept as it is: the event is a dead letter anyway
            return TOPIC_OF_TYPE[kind], value.encode("utf-8", errors="surrogatepass")
    return TOPIC_OF_TYPE[kind], b""


def _fast(raw: bytes) -> dict[str, object] | None:
    """The routing fields of a line msgspec decodes (None: the scan decides)."""
    try:
        decoded = _DECODER.decode(raw)
        fields: dict[str, object] = {}
        for name in ("type", *KEY_FIELDS):
            value = bytes(getattr(decoded, name))
            fields[name] = _TEXT.decode(value) if value.startswith(b'"') else (
                None if value == b"null" else _NOT_TEXT)
        return fields
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None


def _scan(text: str) -> dict[str, object]:
    """The top-level string fields of ``text``, one complete JSON object, read without parsing its
    nested values; ValueError if it is not one."""
    i = _SPACE.match(text).end()  # type: ignore[union-attr]  # \s* always matches
    if not text.startswith("{", i):
        raise ValueError(_not_an_object(text))
    i = _SPACE.match(text, i + 1).end()  # type: ignore[union-attr]
    fields: dict[str, object] = {}
    if not text.startswith("}", i):
        while True:
            key = _KEY.match(text, i)
            if key is None:
                raise ValueError(_not_an_object(text))
            name, i = str(_unquote(key.group(1))), key.end()
            if text.startswith('"', i):
                value = _STRING.match(text, i)
                if value is None:
                    raise ValueError(_not_an_object(text))
                fields[name], i = _unquote(value.group()), value.end()
            else:
                fields[name], i = _NOT_TEXT, _skip(text, i)
            i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
            if text.startswith(",", i):
                i += 1
                continue
            if text.startswith("}", i):
                break
            raise ValueError(_not_an_object(text))
    if text[i + 1:].strip():
        raise ValueError(_not_an_object(text))
    return fields


def _unquote(quoted: str) -> object:
    try:
        value: object = json.loads(quoted)
    except ValueError:
        return _NOT_TEXT
    return value


def _skip(text: str, i: int) -> int:
    """The index after the value that starts at ``i`` (at the ``,`` or ``}`` that ends it), however
    deeply it nests: brackets counted, strings jumped over, no recursion."""
    depth = 0
    while True:
        found = _SPECIAL.search(text, i)
        if found is None:
            return len(text)
        char, j = found.group(), found.start()
        if char == '"':
            string = _STRING.match(text, j)
            if string is None:
                return len(text)
            i = string.end()
            continue
        if char in "[{":
            depth += 1
        elif depth == 0:  # a "," or the closing "}" of the object: the value ended before it
            return j
        elif char in "]}":
            depth -= 1
        i = j + 1


def _not_an_object(text: str) -> str:
    """Why ``text`` is not one JSON object, in json's words where it has them."""
    try:
        value = json.loads(text)
    except RecursionError:
        return "not a JSON event (nested too deeply); each line must be one event object with a \"type\""
    except json.JSONDecodeError as error:
        return (f"not a JSON event ({error.msg} at column {error.colno}); each line must be one event "
                "object with a \"type\"")
    except ValueError:  # an integer of more digits than Python converts, outside an object
        return ("not a JSON event (a number of too many digits); each line must be one event object "
                "with a \"type\"")
    return f"expected a JSON object with a \"type\", got {type(value).__name__}"
