"""The canary verdicts from the shared state: what /metrics, the alert loop and ``monitor canary`` read.

The comparisons read the epochs of session statistics their periods need and when each ranker was seen
(``RedisState.history``), summed over partitions in Redis; deploys detected in the impressions join the
deploy events (see monitor/core/canary and docs/canary.md). The rollup lease holder
(:mod:`.rollup_lease`) computes them with :func:`current` as part of the rollup, which every worker's
``/metrics`` and alert loop read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from monitor.alerting.alertmanager import AlertmanagerClient
from monitor.core.canary import CanaryConfig, Comparison, comparisons, every_deploy
from monitor.core.canary.alerts import AlertBook, AlertConfig
from monitor.core.events import Deploy
from monitor.store.writer import RedisState

log = logging.getLogger("monitor.worker")


@dataclass(frozen=True)
class Verdicts:
    comparisons: list[Comparison]
    deploys: list[Deploy]


async def current(state: RedisState, config: CanaryConfig) -> Verdicts:
    deploys = await state.deploys()
    history = await state.history(deploys, config)
    every = every_deploy(history, deploys)
    return Verdicts(comparisons(history, deploys, config), every)


LOOP_SHARE = 10.0  # the wait after an evaluation: at least this many times its duration


async def alert_loop(source: Callable[[], Awaitable[Verdicts | None]], client: AlertmanagerClient,
                     alerts: AlertConfig, interval: float = 15.0) -> None:
    """Every ``interval`` seconds: the verdicts ``source`` gives (the worker's: the rollup's, read from
    Redis; None: none yet, the round is skipped), through the alert book, to Alertmanager (each worker
    sends the same alerts; Alertmanager merges them by their labels). The wait after an evaluation is at
    least ``LOOP_SHARE`` times its duration, so a slow source never starves the consumer."""
    book = AlertBook(alerts)
    client.start()
    try:
        while True:
            started = time.monotonic()
            try:
                verdicts = await source()
                notes = [] if verdicts is None else book.update(time.time(), verdicts.comparisons)
                if notes:
                    log.info("alerts: %s",
                             ", ".join(f"{n.labels.get('alertname')} {n.status}" for n in notes))
                client.send(notes)
            except Exception:  # Redis down, say: the next round tries again
                log.exception("canary verdicts failed; retrying in %.0f s", interval)
            # an evaluation runs on the event loop that consumes the topics: however long it takes, the
            # verdicts take at most about a tenth of the worker's time
            await asyncio.sleep(max(interval, LOOP_SHARE * (time.monotonic() - started)))
    finally:
        client.stop()
