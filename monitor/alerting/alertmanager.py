"""Direct notifications to Alertmanager's v2 API (``POST /api/v2/alerts``), stdlib only.

:meth:`AlertmanagerClient.send` takes :class:`~monitor.core.canary.alerts.Notification` values (from
:class:`~monitor.core.canary.alerts.AlertBook`) and never blocks or raises; :meth:`flush` delivers what is
due; :meth:`start` runs ``flush`` on a background thread instead. What it guarantees:

* **Repeats.** Alertmanager forgets an alert whose ``endsAt`` passes, so a firing alert is posted with
  ``endsAt = now + alert_ttl`` and re-posted every ``resend_interval`` while it fires (Prometheus does
  the same: ``--rules.alert.resend-delay`` 1m, valid for 4 × that). If the monitor dies, its alerts
  resolve by themselves after ``alert_ttl``.
* **Delivery after an outage.** Undelivered notifications wait in a pending queue keyed by the alert's
  label set (a newer state of the same alert replaces the older: Alertmanager only needs the latest),
  retried with exponential backoff (``backoff_initial`` doubling up to ``backoff_max``). The queue holds
  at most ``max_pending`` alerts; beyond that the oldest is dropped and logged (a dropped firing alert
  comes back with the next re-send; a dropped resolution is then done by ``alert_ttl``).
* **No exceptions into the caller.** Network and HTTP errors are logged (the first failure as a warning,
  the recovery as info) and counted; an alert Alertmanager rejects as invalid (HTTP 400) is logged and
  dropped, not retried forever.

Thread-safe: ``send`` and ``flush`` may be called from any thread; one flush runs at a time.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from monitor.core.canary.alerts import Notification

log = logging.getLogger("monitor.alerting")

Key = tuple[tuple[str, str], ...]
Poster = Callable[[str, bytes, float], int]


def rfc3339(ts: float) -> str:
    """Unix seconds as RFC 3339 UTC with milliseconds, e.g. ``2025-11-21T08:00:00.000Z``."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def postable(note: Notification, now: float, ttl: float, generator_url: str = "") -> dict[str, Any]:
    """The v2 API's ``postableAlert`` for a notification: firing ones end ``ttl`` seconds from ``now``."""
    ends = now + ttl if note.ends_at is None else note.ends_at
    alert: dict[str, Any] = {"labels": dict(note.labels), "annotations": dict(note.annotations),
                             "startsAt": rfc3339(note.starts_at),
                             "endsAt": rfc3339(max(ends, note.starts_at))}
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


def http_post(url: str, body: bytes, timeout: float) -> int:
    """POST JSON ``body``; the HTTP status (an HTTP error's status too). Network errors raise OSError."""
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _positive(name: str, value: float) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive number, got {value!r}")


class AlertmanagerClient:
    """Sends notifications to the Alertmanager at ``url`` (e.g. ``http://127.0.0.1:9093``)."""

    def __init__(self, url: str, *, resend_interval: float = 60.0, alert_ttl: float | None = None,
                 max_pending: int = 1000, batch_size: int = 200, timeout: float = 5.0,
                 backoff_initial: float = 1.0, backoff_max: float = 60.0, generator_url: str = "",
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 post: Poster = http_post) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url: expected an http:// or https:// address, got {url!r}")
        ttl = 4.0 * resend_interval if alert_ttl is None else alert_ttl
        for name, value in (("resend_interval", resend_interval), ("alert_ttl", ttl), ("timeout", timeout),
                            ("backoff_initial", backoff_initial), ("backoff_max", backoff_max)):
            _positive(name, value)
        for name, count in (("max_pending", max_pending), ("batch_size", batch_size)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"{name}: expected a positive integer, got {count!r}")
        if ttl <= resend_interval:
            raise ValueError(f"alert_ttl: must be longer than resend_interval ({resend_interval}), got {ttl}")
        self.endpoint = url.rstrip("/") + "/api/v2/alerts"
        self.resend_interval, self.alert_ttl, self.timeout = resend_interval, ttl, timeout
        self.max_pending, self.batch_size, self.generator_url = max_pending, batch_size, generator_url
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self._clock, self._monotonic, self._post = clock, monotonic, post
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._pending: OrderedDict[Key, Notification] = OrderedDict()
        self._firing: OrderedDict[Key, Notification] = OrderedDict()
        self._next_resend = math.inf
        self._next_attempt = -math.inf
        self._backoff = 0.0
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.delivered = 0
        self.failures = 0
        self.dropped = 0

    # -- the caller's side ----------------------------------------------------------------------------

    def send(self, notifications: Iterable[Notification]) -> None:
        """Queue notifications for delivery; firing ones are re-sent until a resolved one replaces them."""
        with self._lock:
            for note in notifications:
                key = note.key
                if note.ends_at is None:
                    self._firing[key] = note
                    self._firing.move_to_end(key)
                    if len(self._firing) > self.max_pending:
                        self._firing.popitem(last=False)
                else:
                    self._firing.pop(key, None)
                self._enqueue(key, note)
            if self._firing and self._next_resend == math.inf:
                self._next_resend = self._monotonic() + self.resend_interval

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def firing(self) -> list[Notification]:
        with self._lock:
            return list(self._firing.values())

    # -- delivery -------------------------------------------------------------------------------------

    def _enqueue(self, key: Key, note: Notification) -> None:
        """Caller holds the lock."""
        self._pending[key] = note
        self._pending.move_to_end(key)
        while len(self._pending) > self.max_pending:
            dropped_key, dropped = self._pending.popitem(last=False)
            self.dropped += 1
            log.warning("alert queue full (%d): dropped the %s notification of %s", self.max_pending,
                        dropped.status, dict(dropped_key))

    def flush(self) -> bool:
        """Deliver what is due (pending, and re-sends of firing alerts); True if nothing is left pending.

        Respects the backoff after a failure (returns False at once while waiting). Never raises."""
        with self._flushing:
            try:
                return self._flush()
            except Exception:  # never into the caller's loop
                log.exception("unexpected error while sending alerts to %s", self.endpoint)
                return False

    def _flush(self) -> bool:
        while True:
            with self._lock:
                now = self._monotonic()
                if now >= self._next_resend:
                    for key, note in self._firing.items():
                        self._enqueue(key, note)
                    self._next_resend = now + self.resend_interval if self._firing else math.inf
                if not self._pending:
                    return True
                if now < self._next_attempt:
                    return False
                batch = list(self._pending.items())[: self.batch_size]
            wall = self._clock()
            body = json.dumps([postable(note, wall, self.alert_ttl, self.generator_url) for _, note in batch],
                              ensure_ascii=False).encode("utf-8")
            status, problem = self._attempt(body)
            with self._lock:
                if status == 200 or status == 400:
                    for key, note in batch:
                        if self._pending.get(key) is note:
                            del self._pending[key]
                if status == 200:
                    self.delivered += len(batch)
                    if self._failing:
                        log.info("Alertmanager %s reachable again; delivered %d alerts", self.endpoint,
                                 len(batch))
                    self._failing, self._backoff, self._next_attempt = False, 0.0, -math.inf
                    continue
                if status == 400:
                    self.dropped += len(batch)
                    log.error("Alertmanager %s rejected %d alerts as invalid; dropped: %s", self.endpoint,
                              len(batch), problem)
                    continue
                self.failures += 1
                self._backoff = min(self.backoff_max, max(self.backoff_initial, 2.0 * self._backoff))
                self._next_attempt = self._monotonic() + self._backoff
                level = logging.DEBUG if self._failing else logging.WARNING
                log.log(level, "cannot send %d alerts to %s (%s); retrying in %.1f s", len(self._pending),
                        self.endpoint, problem, self._backoff)
                self._failing = True
                return False

    def _attempt(self, body: bytes) -> tuple[int | None, str]:
        try:
            status = self._post(self.endpoint, body, self.timeout)
        except (OSError, ValueError) as error:
            return None, f"{type(error).__name__}: {error}"
        return status, f"HTTP {status}"

    # -- the background thread ------------------------------------------------------------------------

    def start(self, poll_interval: float = 0.5) -> None:
        """Run :meth:`flush` every ``poll_interval`` seconds on a daemon thread until :meth:`stop`."""
        _positive("poll_interval", poll_interval)
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(poll_interval):
                self.flush()

        self._thread = threading.Thread(target=loop, name="alertmanager-client", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, then try once more to deliver what is pending."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout)
        self.flush()
