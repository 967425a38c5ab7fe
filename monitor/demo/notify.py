"""Alert delivery off the main loop: a queue and one thread that posts notifications as they come.

The pipeline never waits for Alertmanager: a slow or unreachable endpoint (the client retries) delays
only the deliveries. Failures are counted and reported, never raised into the demo.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

from monitor.demo.canary import AlertNote

Post = Callable[[Sequence[AlertNote]], None]


class Notifier:
    def __init__(self, post: Post, on_error: Callable[[str], None] | None = None) -> None:
        self._post, self._on_error = post, on_error
        self._queue: queue.Queue[list[AlertNote] | None] = queue.Queue()
        self.sent = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="alert-delivery", daemon=True)
        self._thread.start()

    def send(self, notes: Sequence[AlertNote]) -> None:
        if notes:
            self._queue.put(list(notes))

    def _run(self) -> None:
        while True:
            notes = self._queue.get()
            if notes is None:
                return
            try:
                self._post(notes)
                self.sent += len(notes)
            except Exception as error:  # a delivery failure must not stop the demo
                self.failed += len(notes)
                if self._on_error is not None:
                    self._on_error(f"alert delivery failed: {error}")

    def close(self, timeout: float = 15.0) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)
