"""What the worker's log leaves out: Faust's timer drift notices, at most one per timer every ten minutes.

Under load, mode (Faust's service library) logs ``Timer Monitor.sampler woke up too late, with a drift of
+1.2 ...`` each time one of its periodic timers runs late because the event loop was busy, often several
times a second: in a loaded two-process run they were 181 of 374 log lines. There is nothing to do about
one of them (the process is busy: whether it keeps up is what ``search_relevance_consumer_lag`` on
``/metrics`` shows), so :class:`TimerDriftFilter` passes the first notice of each timer, then one per
``every`` seconds, which says how many were left out since the last. Every other record passes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

TIMER_LOGGER = "mode.timers"
"""The logger of mode's timers (``mode/timers.py``)."""

DRIFT = "Timer %s woke up too "
"""The start of the format of both drift notices (``too late``, ``too early``)."""


class TimerDriftFilter(logging.Filter):
    """Passes one drift notice per timer every ``every`` seconds (by ``clock``); every other record passes.

    A notice that passes after some were left out ends with ``(N more like it in the last S s not
    logged)``.
    """

    def __init__(self, every: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if every <= 0:
            raise ValueError(f"every must be a positive number of seconds, got {every!r}")
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}  # timer name → when its last notice passed
        self._left_out: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith(DRIFT)):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        timer = str(args[0]) if args else "?"
        now = self.clock()
        last = self._last.get(timer)
        if last is not None and now - last < self.every:
            self._left_out[timer] = self._left_out.get(timer, 0) + 1
            return False
        left_out = self._left_out.pop(timer, 0)
        if left_out and last is not None:
            # args (), not None: Faust's (mode's) formatter wraps a non-tuple in one and formats again
            record.msg, record.args = (f"{record.getMessage()} ({left_out} more like it in the last "
                                       f"{now - last:.0f} s not logged)"), ()
        self._last[timer] = now
        return True


def quiet_timer_drift(every: float = 600.0) -> TimerDriftFilter:
    """Install a :class:`TimerDriftFilter` on mode's timer logger (once); return the one installed."""
    logger = logging.getLogger(TIMER_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, TimerDriftFilter):
            return existing
    installed = TimerDriftFilter(every)
    logger.addFilter(installed)
    return installed
