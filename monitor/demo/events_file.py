"""Reading a JSONL file of stream events for ``monitor replay``: one event value per line.

The format is what :func:`monitor.sim.write_jsonl` (and ``monitor demo --write-events``) writes: each
line is the raw value a producer would send to Kafka (schema v1, ``docs/events.md``). The topic follows
from the event's ``type`` (``impression`` → ``impressions``, ``annotation`` → ``annotations``, ``deploy``
→ ``deploys``) and the key from its ``session_id``, else ``query``, else ``ranker``, as the simulator keys
them. Blank lines are skipped.

Two kinds of bad line, as in the worker:

* a line that is not an event to route (not one complete JSON object, no known ``type``:
  :func:`monitor.core.routing.route`) has no topic to go to: it is a :class:`LineError` naming
  ``FILE:LINE`` and the replay stops;
* a routable line whose payload is invalid (a missing field, an unknown grade, NaN, bad UTF-8 inside a
  string, a field nested 10,000 deep, an integer of 5,000 digits, a lone surrogate …) is passed on as it
  is and becomes the worker's dead letter, with its reason code, field and reason.

A UTF-8 byte-order mark at the start of the file is skipped (an editor on Windows writes one).

>>> route(b'{"type":"deploy","kind":"deploy","ranker":"r1","ts":1}')
('deploys', b'r1')
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from monitor.core.errors import MonitorError
from monitor.core.routing import TOPIC_OF_TYPE, route

__all__ = ["BOM", "TOPIC_OF_TYPE", "Line", "LineError", "read_events", "routable", "route"]
BOM = b"\xef\xbb\xbf"


class LineError(MonitorError):
    """``FILE:LINE: reason`` for a line that is not a routable event."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path, self.line, self.reason = path, line, reason


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
            if number == 1 and raw.startswith(BOM):
                raw = raw[len(BOM):]
            if not raw.strip():
                continue
            try:
                topic, key = route(raw)
            except ValueError as error:
                raise LineError(name, number, str(error)) from None
            yield Line(number, topic, key, raw, end)
