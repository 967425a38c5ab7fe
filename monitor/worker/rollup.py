"""The rollup: what every worker's ``/metrics`` exports of the shared state, computed by one worker.

Computed directly, a scrape reads every partition's window slices, epochs, ranker sightings, deploys and
waiting sessions from Redis and runs the canary comparisons over them (:func:`compute`): Redis work in
proportion to partitions × workers × scrapes. Instead one worker at a time, the *exporter*
(:mod:`monitor.worker.rollup_lease`, the holder of a lease in Redis), runs :func:`compute` every
``rollup_interval`` seconds and stores the result, encoded with msgspec (:func:`encode`: floats as
IEEE doubles, so bit for bit), in one key with the time its reads began; every scrape of every worker,
the alert loop and ``monitor canary`` read that key (one command) and export what it holds.

The key is per fingerprint of what the values depend on (:func:`fingerprint`: the stream's and the
canary's settings, the package version and this format), so workers whose settings differ (a rolling
change of them) each read and write their own settings' rollup, each with its exporter, as each exported
its own values before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec

from monitor import __version__
from monitor.core.canary import CanaryConfig, Comparison
from monitor.core.events import Deploy
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.counters import Counter
from monitor.core.stream.snapshot import Snapshot
from monitor.core.stream.stats import Stats
from monitor.store.writer import RedisState
from monitor.worker.verdicts import Verdicts, current

FORMAT = 2
"""The encoding's version: a new one is a new fingerprint, so a new key. (2: counters as
:class:`~monitor.core.stream.counters.Counter` arrays, ``[name, group, label]``.)"""


@dataclass(frozen=True)
class RollupBody:
    """What every worker exports alike: the read model, the canary verdicts with every deploy, and the
    join's health (sessions waiting over all partitions, Redis ``used_memory``)."""

    snapshot: Snapshot
    verdicts: Verdicts
    waiting: int
    redis_memory: int


@dataclass(frozen=True)
class Rollup:
    """:class:`RollupBody` as the exporter ``by`` computed it: its reads began at ``at`` (wall clock, Unix
    seconds) and took ``took`` seconds; past ``fresh`` a newer one is overdue (:mod:`.rollup_lease`)."""

    shared: RollupBody
    at: float
    took: float
    fresh: float
    by: str

    def age(self, now: float) -> float:
        """Seconds since its reads began, at wall-clock time ``now``."""
        return now - self.at

    def stale(self, now: float) -> bool:
        """True once a newer rollup is overdue: no exporter has replaced this one in time."""
        return now > self.fresh


async def compute(state: RedisState, canary: CanaryConfig) -> RollupBody:
    """What a scrape computed before the rollup, with the same reads in the same order: the snapshot, the
    verdicts (:func:`monitor.worker.verdicts.current`), the health. Round trips in proportion to nothing but
    the steps; Redis work in proportion to the partitions."""
    snapshot = await state.snapshot()
    verdicts = await current(state, canary)
    waiting, memory = await state.health()
    return RollupBody(snapshot, verdicts, waiting, memory)


class _Wire(msgspec.Struct, array_like=True):
    """The stored form: a MessagePack array (mappings with tuple keys as lists of rows, in their order)."""

    format: int
    at: float
    took: float
    fresh: float
    by: str
    watermark: float
    windows: list[tuple[str, str, dict[str, float]]]
    counters: list[tuple[Counter, float]]
    added: dict[str, dict[str, float]]
    removed: dict[str, dict[str, float]]
    comparisons: list[Comparison]
    deploys: list[Deploy]
    waiting: int
    redis_memory: int


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Wire)


def encode(rollup: Rollup) -> bytes:
    """``rollup`` as bytes (:func:`decode` gives it back equal, every float bit for bit)."""
    shared, snap = rollup.shared, rollup.shared.snapshot
    return _ENCODER.encode(_Wire(
        FORMAT, rollup.at, rollup.took, rollup.fresh, rollup.by, snap.watermark,
        [(window, group, dict(stats)) for (window, group), stats in snap.windows.items()],
        list(snap.counters.items()),
        {group: dict(stats) for group, stats in snap.added.items()},
        {group: dict(stats) for group, stats in snap.removed.items()},
        list(shared.verdicts.comparisons), list(shared.verdicts.deploys), shared.waiting,
        shared.redis_memory))


def decode(raw: bytes, config: StreamConfig) -> Rollup:
    """What :func:`encode` wrote, its snapshot under ``config`` (the reader's settings: the fingerprint
    in the key makes them the writer's); ``ValueError`` for bytes it did not write."""
    try:
        wire = _DECODER.decode(raw)
    except msgspec.DecodeError as error:
        raise ValueError(f"not a rollup of format {FORMAT}: {error}") from None
    if wire.format != FORMAT:
        raise ValueError(f"a rollup of format {wire.format}, not {FORMAT}")
    snapshot = Snapshot(config, wire.watermark, {(w, g): Stats(stats) for w, g, stats in wire.windows},
                        dict(wire.counters),
                        {g: Stats(stats) for g, stats in wire.added.items()},
                        {g: Stats(stats) for g, stats in wire.removed.items()})
    shared = RollupBody(snapshot, Verdicts(wire.comparisons, wire.deploys), wire.waiting, wire.redis_memory)
    return Rollup(shared, wire.at, wire.took, wire.fresh, wire.by)


def fingerprint(stream: StreamConfig, canary: CanaryConfig) -> str:
    """16 hex digits naming what the rollup's values depend on: the stream's settings (windows, epochs,
    history, …), the canary's, the package version and :data:`FORMAT`. (The label caps, ``max_rankers``
    and ``max_variants``, are applied by each worker when it exports, so they are not in it.)"""
    canonical = msgspec.json.encode([FORMAT, __version__, stream, canary], order="sorted")
    return hashlib.blake2b(canonical, digest_size=8).hexdigest()
