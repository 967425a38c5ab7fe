"""Write simulated records to a JSONL file: one raw event value per line, in the order given (all at once:
``write_jsonl``; or each as it is taken by a consumer of the records: ``write_through``).

The only I/O of the simulator. Valid values never contain a newline (compact JSON escapes it); malformed
ones are written as they are, so a file with ``include_invalid=True`` exercises a reader's error path
(``monitor evaluate`` stops at the first bad line, so give it ``include_invalid=False``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from monitor.sim.records import SimEvent


def write_jsonl(
    path: str | Path,
    events: Iterable[SimEvent],
    topics: Collection[str] | None = None,
    include_invalid: bool = False,
) -> int:
    """Write the values of ``events`` (only ``topics`` if given) to ``path``; return the lines written."""
    written = 0
    with Path(path).open("wb") as handle:
        for event in events:
            if topics is not None and event.topic not in topics:
                continue
            if event.expected_error is not None and not include_invalid:
                continue
            if b"\n" in event.value:
                raise ValueError(f"a value holding a newline cannot be one JSONL line: {event.value[:80]!r}")
            handle.write(event.value)
            handle.write(b"\n")
            written += 1
    return written


def write_through(events: Iterable[SimEvent], handle: BinaryIO) -> Iterator[SimEvent]:
    """``events``, each written to ``handle`` as one line (its value) before it is yielded, in order, invalid
    ones too (``monitor produce --write-events``: the file holds what was sent); ``handle`` is closed after
    the last one. A value holding a line break cannot be one line: ValueError (the simulator makes none)."""
    with handle:
        for event in events:
            if b"\n" in event.value or b"\r" in event.value:
                raise ValueError(f"a value holding a line break cannot be one JSONL line: "
                                 f"{event.value[:80]!r}")
            handle.write(event.value + b"\n")
            yield event
