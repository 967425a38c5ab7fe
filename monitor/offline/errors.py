"""Input errors that name the file, the line and the reason."""

from __future__ import annotations

from monitor.core.errors import MonitorError


class InputError(MonitorError):
    """Malformed input: ``file:line: reason``."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        self.path, self.line, self.reason = path, line, reason
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")
