"""The canary verdicts from the shared state: what /metrics, the alert loop and ``monitor canary`` read.

The totals are each group's cumulative statistics (added minus taken back), summed over partitions in
Redis, so every worker computes the same verdicts (see monitor/core/canary and docs/canary.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from monitor.alerting.alertmanager import AlertmanagerClient
from monitor.core.canary import CanaryConfig, Comparison, comparisons
from monitor.core.canary.alerts import AlertBook, AlertConfig
from monitor.core.events import Deploy
from monitor.export.snapshot import Snapshot
from monitor.pipeline.redis_state import RedisState

log = logging.getLogger("monitor.worker")


@dataclass(frozen=True)
class Verdicts:
    comparisons: list[Comparison]
    deploys: list[Deploy]


async def current(state: RedisState, config: CanaryConfig, snapshot: Snapshot | None = None) -> Verdicts:
    snap = snapshot if snapshot is not None else await state.snapshot()
    deploys = await state.deploys()
    return Verdicts(comparisons(snap.totals(), deploys, config), deploys)


async def alert_loop(state: RedisState, config: CanaryConfig, client: AlertmanagerClient,
                     alerts: AlertConfig, interval: float = 15.0) -> None:
    """Every ``interval`` seconds: the verdicts, through the alert book, to Alertmanager (each worker
    sends the same alerts; Alertmanager merges them by their labels)."""
    book = AlertBook(alerts)
    client.start()
    try:
        while True:
            try:
                verdicts = await current(state, config)
                notes = book.update(time.time(), verdicts.comparisons)
                if notes:
                    log.info("alerts: %s",
                             ", ".join(f"{n.labels.get('alertname')} {n.status}" for n in notes))
                client.send(notes)
            except Exception:  # Redis down, say: the next round tries again
                log.exception("canary verdicts failed; retrying in %.0f s", interval)
            await asyncio.sleep(interval)
    finally:
        client.stop()
