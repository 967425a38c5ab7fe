"""A small progress bar on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Steps of a long job: ``step("reading run")`` … ``done()``; silent when ``stream`` is not a tty."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.total, self.count = total, 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()

    def step(self, label: str) -> None:
        self.count += 1
        if not self.enabled:
            return
        width = 24
        filled = width * min(self.count, self.total) // self.total
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.count}/{self.total} "
                          f"{label:<32} {elapsed:6.1f}s")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write(f"\r{' ' * 78}\r")
            self.stream.flush()
