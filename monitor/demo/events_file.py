"""Reading a JSONL file of stream events for ``monitor replay``: one event value per line.

The format is what :func:`monitor.sim.write_jsonl` (and ``monitor demo --write-events``) writes: each
line is the raw value a producer would send to Kafka (schema v1, ``docs/events.md``). The topic follows
from the event's ``type`` (``impression`` → ``impressions``, ``annotation`` → ``annotations``, ``deploy``
→ ``deploys``) and the key from its ``session_id``, else ``query``, else ``ranker``, as the simulator keys
them. Blank lines are skipped.

Two kinds of bad line, as in the worker:

* a line that cannot be routed (not JSON, not an object, no known ``type``) has no topic to go to: it is
  a :class:`LineError` naming ``FILE:LINE`` and the replay stops;
* a routable line whose payload is invalid (a missing field, an unknown grade, NaN, bad UTF-8 inside a
  string …) is passed on as it is and becomes a dead letter counted by reason code, as in the worker.

>>> route(b'{"type":"deploy","kind":"deploy","ranker":"r1","ts":1}')
('deploys', b'r1')
>>> route(b'{"type":"click"}')
Traceback (most recent call last):
...
ValueError: unknown event type 'click' (expected impression, annotation or deploy)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from monitor.core.errors import MonitorError

TOPIC_OF_TYPE = {"impression": "impressions", "annotation": "annotations", "deploy": "deploys"}


class LineError(MonitorError):
    """``FILE:LINE: reason`` for a line that is not a routable event."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path, self.line, self.reason = path, line, reason


def route(raw: bytes) -> tuple[str, bytes]:
    """Topic and key of one raw event value; ValueError (the reason) if it cannot be routed."""
    text = raw.decode("utf-8", errors="replace")  # bad UTF-8 inside a value is the validator's to report
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not a JSON event ({error.msg} at column {error.colno}); each line must be one "
                         "event object with a \"type\"") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object with a \"type\", got {type(obj).__name__}")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in TOPIC_OF_TYPE:
        raise ValueError(f"unknown event type {kind!r} (expected impression, annotation or deploy)")
    for field in ("session_id", "query", "ranker"):
        value = obj.get(field)
        if isinstance(value, str):
            return TOPIC_OF_TYPE[kind], value.encode("utf-8")
    return TOPIC_OF_TYPE[kind], b""


def routable(raw: bytes) -> bool:
    """True when ``raw`` can be one line of a replay file (routable, and no newline inside)."""
    if b"\n" in raw or b"\r" in raw:
        return False
    try:
        route(raw)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Line:
    """One routed line: ``end`` is the byte offset after it (for a progress bar)."""

    number: int
    topic: str
    key: bytes
    value: bytes
    end: int


def read_events(path: str | Path) -> Iterator[Line]:
    """Each non-blank line, routed; :class:`LineError` at the first line that cannot be.

    An unreadable file raises :class:`LineError` with line 0 (its message is ``FILE: reason``).
    """
    name = str(path)
    try:
        handle = Path(path).open("rb")  # noqa: SIM115 (a generator: closed by the with below)
    except OSError as error:
        raise LineError(name, 0, f"cannot read: {error.strerror or error}") from error
    end = 0
    with handle:
        for number, line in enumerate(handle, start=1):
            end += len(line)
            raw = line.rstrip(b"\r\n")
            if not raw.strip():
                continue
            try:
                topic, key = route(raw)
            except ValueError as error:
                raise LineError(name, number, str(error)) from None
            yield Line(number, topic, key, raw, end)
