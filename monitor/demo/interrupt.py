"""Ctrl-C between two events: the first SIGINT sets a flag the feed loop checks after each event, so an
event is never half applied to the pipeline; a second one interrupts at once (KeyboardInterrupt)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class StopFlag:
    def __init__(self) -> None:
        self.stopped = False


@contextmanager
def stop_on_sigint() -> Iterator[StopFlag]:
    """A flag set by Ctrl-C while the block runs (only in the main thread, where signals arrive)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        if flag.stopped:
            raise KeyboardInterrupt
        flag.stopped = True

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
