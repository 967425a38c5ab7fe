"""Where a file's dead letters are: each one's file and line, for ``monitor replay`` (and ``--dead-letters``).

The worker publishes a dead letter to its dead-letter topic as the original bytes with headers
(``error.code``, ``error.field``, ``error.reason``, ``source.topic``, ``source.partition``,
``source.offset``). A file has lines instead of offsets, so a replay's dead letter is one JSON object
per line with the same names plus ``source.file`` and ``source.line``, and the original line: ``value``
as text, or ``value_base64`` when the line is not UTF-8.

>>> from monitor.store.memory import DeadLetter
>>> log = DeadLetterLog("events.jsonl")
>>> log.add(12, DeadLetter("impressions", 0, 11, "invalid_json", "", "invalid JSON: nested too deeply",
...                        b"[["))
>>> log.first
['events.jsonl:12: invalid_json: invalid JSON: nested too deeply']
"""

from __future__ import annotations

import base64
import json
from typing import TextIO

from monitor.store.memory import DeadLetter

FIRST = 5  # dead letters named in a summary (the rest are in the --dead-letters file)


class DeadLetterLog:
    """The dead letters of one file: how many, the first :data:`FIRST` as ``FILE:LINE: code: reason``,
    and every one as a JSON line on ``out`` (when given)."""

    def __init__(self, path: str, out: TextIO | None = None) -> None:
        self.path, self.out = path, out
        self.count = 0
        self.first: list[str] = []

    def add(self, line: int, letter: DeadLetter) -> None:
        self.count += 1
        where = f"{letter.field}: " if letter.field else ""
        if len(self.first) < FIRST:
            self.first.append(f"{self.path}:{line}: {letter.code}: {where}{letter.reason}")
        if self.out is not None:
            self.out.write(json.dumps(record(self.path, line, letter), ensure_ascii=False) + "\n")


def record(path: str, line: int, letter: DeadLetter) -> dict[str, object]:
    """One dead letter as a JSON-ready object: the worker's header names, the file and line, the value."""
    out: dict[str, object] = {
        "source.file": path, "source.line": line, "error.code": letter.code, "error.field": letter.field,
        "error.reason": letter.reason, "source.topic": letter.topic, "source.partition": letter.partition,
        "source.offset": letter.offset,
    }
    try:
        out["value"] = letter.raw.decode("utf-8")
    except UnicodeDecodeError:
        out["value_base64"] = base64.b64encode(letter.raw).decode("ascii")
    return out
