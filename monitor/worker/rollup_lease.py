"""The exporter role: one worker of a group computes the rollup (:mod:`.rollup`) while it holds a lease
in Redis; every worker reads it.

Every worker runs :meth:`RollupLease.run`: each tick (``rollup_interval``, at most a second) it calls
:meth:`~monitor.store.lease.Lease.hold`, which renews the lease for the worker holding it and gives it
to the first other worker that asks once its holder has stopped renewing (killed, stuck, gone) for the
lease's time to live. The holder computes the rollup when due and stores it only while it still holds
the lease. A computation that fails gives the lease up, so another worker tries, and that worker waits
(doubling from ``rollup_interval`` to a minute) before asking for it again.

Timing, with ``I`` = ``rollup_interval`` and ``d`` = how long the last computation took:

* a computation starts every ``max(I, 10·d)`` seconds after the last one ended, so the exporter spends at
  most about a tenth of its time on it (as the alert loop: the computation runs on the consuming loop);
* the lease lives ``max(3·I, 4·d)`` seconds from its last renewal (every tick, and with each store);
* a rollup is *fresh* until ``at + d + max(max(I, 10·d), ttl) + tick + d + I``: when its successor is due
  at the latest, whether its exporter lives (the next computation) or died just after storing it (the
  lease runs out, another worker takes it within a tick and computes), plus ``I`` of slack. With the
  default ``I`` = 5 s and a quick computation that is 21 s.

A scrape exports the stored rollup whatever its age, with ``search_relevance_rollup_age_seconds``; there
is none before the first (then the shared series have no samples), and ``/readyz`` reports a rollup
missing or past its freshness, or older than ``max_rollup_age`` (30 s by default), whatever the reason:
an exporter that died and whose lease has not run out, a computation so slow that its schedule
(``10·d``) leaves the values older than that, a consuming loop too busy to compute
(:meth:`RollupLease.problems`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

from monitor.core.canary import CanaryConfig
from monitor.store.lease import Lease
from monitor.store.writer import RedisState
from monitor.worker.backoff import Backoff
from monitor.worker.rollup import Rollup, compute, decode, encode, fingerprint
from monitor.worker.verdicts import LOOP_SHARE

log = logging.getLogger("monitor.worker")

TICK = 1.0
"""Seconds between two asks for the lease, at most (``rollup_interval`` if shorter)."""

KEEP = 86400.0
"""Seconds a rollup stays in Redis after its last write (so a fingerprint no worker uses goes away)."""


def default_token() -> str:
    """The name a worker holds the lease under: host, process id and a random part (a restarted process
    with the same id is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RollupLease:
    """The exporter loop of one worker over ``state`` (its Redis and key prefix), and the reads every
    worker makes of the rollup."""

    def __init__(self, state: RedisState, canary: CanaryConfig, interval: float,
                 token: str | None = None, max_age: float | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"rollup interval must be positive, got {interval}")
        if max_age is not None and max_age <= 0:
            raise ValueError(f"max rollup age must be positive, got {max_age}")
        self.state, self.canary, self.interval = state, canary, interval
        self.max_age = max_age
        """The age past which ``/readyz`` says the exported values are too old (None: no bound but the
        freshness the exporter promises)."""
        self.fingerprint = fingerprint(state.config, canary)
        keys = state.keys
        self.lease = Lease(state.redis, keys.rollup(self.fingerprint, "lease"),
                           keys.rollup(self.fingerprint, "value"))
        self.token = token or default_token()
        self.holding = False
        """Whether this worker held the lease at its last ask."""
        self.computed = 0
        """Rollups this worker computed and stored."""
        self.took = 0.0
        self.due = 0.0  # time.monotonic() of the next computation
        self.resting_until = 0.0  # time.monotonic() before which it does not ask (after a failure)
        self.backoff = Backoff(interval, max(60.0, interval))
        self.started = asyncio.Event()
        """Set after the first round (whatever it did): the HTTP server starts then."""

    @property
    def tick(self) -> float:
        return min(self.interval, TICK)

    def ttl(self, took: float | None = None) -> float:
        """The lease's time to live after a computation of ``took`` seconds (the last one by default)."""
        return max(3 * self.interval, 4 * (self.took if took is None else took))

    def fresh_until(self, at: float, took: float) -> float:
        """Until when a rollup whose reads began at ``at`` and took ``took`` seconds is fresh (module
        docstring)."""
        wait = max(self.interval, LOOP_SHARE * took)
        return at + took + max(wait, self.ttl(took)) + self.tick + took + self.interval

    async def run(self) -> None:
        """Rounds for ever, a tick apart; gives the lease up when cancelled (the worker stops)."""
        try:
            while True:
                await self.round()
                self.started.set()
                await asyncio.sleep(self.tick)
        finally:
            if self.holding:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.lease.release(self.token), timeout=2.0)

    async def round(self) -> bool:
        """One tick: ask for (or renew) the lease and, holding it, compute and store the rollup if due.
        True when it stored one."""
        if time.monotonic() < self.resting_until:
            return False
        doing = "asking for the lease"
        try:
            self.holding, _ = await self.lease.hold(self.token, self.ttl())
            if not self.holding or time.monotonic() < self.due:
                return False
            doing = "computing the rollup"
            return await self.refresh()
        except Exception as error:  # Redis unreachable, or a bug in a computation: let another worker try
            pause = self.backoff.advance()
            log.warning("rollup: %s failed (%s: %s); asking for the lease again in %.0f s", doing,
                        type(error).__name__, error, pause)
            if self.holding:
                with contextlib.suppress(Exception):
                    await self.lease.release(self.token)
            self.holding = False
            self.resting_until = time.monotonic() + pause
            return False

    async def refresh(self) -> bool:
        """Compute the rollup and store it if this worker still holds the lease (a worker that lost it
        meanwhile stores nothing); True when stored."""
        at, started = time.time(), time.monotonic()
        shared = await compute(self.state, self.canary)
        took = time.monotonic() - started
        rollup = Rollup(shared, at, took, self.fresh_until(at, took), self.token)
        written = await self.lease.store(self.token, self.ttl(took), encode(rollup), at, rollup.fresh, KEEP)
        self.took = took
        self.due = time.monotonic() + max(self.interval, LOOP_SHARE * took)
        if written != 1:
            self.holding = False
            log.info("rollup: computed in %.2f s but not stored (%s)", took,
                     "the lease went to another worker" if written == 0 else "a later rollup is there")
            return False
        self.computed += 1
        self.backoff = Backoff(self.interval, max(60.0, self.interval))
        return True

    async def read(self) -> Rollup | None:
        """The stored rollup (one Redis command), or None before the first."""
        stored = await self.lease.read()
        return None if stored is None else decode(stored.data, self.state.config)

    async def problems(self, now: float | None = None) -> list[str]:
        """Why the rollup cannot be trusted now (``rollup: …``), for ``/readyz``; one Redis command."""
        found = await self.lease.freshness()
        now = time.time() if now is None else now
        if found is None:
            return [f"rollup: none in Redis yet (the exporter computes one every {self.interval:g} s)"]
        at, fresh = found
        if now > fresh:
            return [f"rollup: stale, computed {now - at:.0f} s ago and not replaced in time (no worker is "
                    f"computing it)"]
        if self.max_age is not None and now - at > self.max_age:
            return [f"rollup: computed {now - at:.1f} s ago, older than max_rollup_age ({self.max_age:g} s): "
                    "the exported values are that old (search_relevance_rollup_duration_seconds says how "
                    "long a computation takes; the exporter computes every max(rollup_interval, 10 × that))"]
        return []
