"""Which events the join admits: the checks that make a valid event a dead letter before the step (a
time before 2000-01-01 or too far ahead of the wall clock, for every event with a ``ts``, or an
impression too far behind its partition: ``ts_out_of_range``; with
``undeclared = "dead_letter"`` a variant or ranker the settings do not declare), and :func:`undeclared`,
which the step also uses to count such impressions under ``other``; :func:`declared_shadow`, an
impression without its shadow lists of undeclared rankers (dropped and counted, never a dead letter).

:func:`admit` is the whole check of a raw message up to the step, in the order both stores apply it
(decode, topic, undeclared, clock); :func:`past_error` needs the partition's watermark, so each store
applies it where it knows that (the Redis batch after its read of the partition)."""

from __future__ import annotations

import math
import re
from functools import lru_cache

import msgspec

from monitor.core.decoding import decode_event
from monitor.core.events import DEFAULT_LIMITS, Event, EventError, Impression, Limits, expect_topic
from monitor.core.grades import Scale
from monitor.core.stream.config import StreamConfig


def admit(raw: bytes, topic: str | None, scale: Scale, config: StreamConfig, now: float | None,
          limits: Limits = DEFAULT_LIMITS, results: bool = True) -> Event:
    """The event of the raw message ``raw`` read from ``topic`` (its role: ``impressions``,
    ``annotations`` or ``deploys``; None: any), or :class:`EventError` (a dead letter with its code,
    field and reason): not a valid event, an event of another topic, an undeclared variant or ranker
    (:func:`undeclared_error`), a time before 2000-01-01 or too far ahead of ``now`` (:func:`clock_error`).
    ``results=False``: an impression's results are checked, not kept (see
    :func:`~monitor.core.decoding.decode_event`; :func:`readmit` decodes them again)."""
    event = decode_event(raw, scale, limits, results)
    if topic is not None:
        expect_topic(event, topic)
    error = undeclared_error(event, config) or clock_error(event, now, config)
    if error is not None:
        raise error
    return event


def readmit(raw: bytes, scale: Scale, config: StreamConfig, limits: Limits = DEFAULT_LIMITS) -> Event:
    """The event of ``raw``, which :func:`admit` took with ``results=False``, now with its results (the
    same bytes decode to the same event), without the undeclared shadow lists (:func:`declared_shadow`:
    the caller counted them when it dropped them from the first)."""
    return declared_shadow(decode_event(raw, scale, limits), config)[0]


EARLIEST_TS = 946684800.0  # 2000-01-01T00:00:00Z: the earliest event time the clock rules accept


def clock_error(event: Event, now: float | None, config: StreamConfig) -> EventError | None:
    """The clock rules of an event with a time (an impression, a deploy, an annotation that has a ``ts``),
    checked against the wall clock ``now`` (None: no clock, no check): dated before 2000-01-01
    (:data:`EARLIEST_TS`) or more than ``max_future`` ahead of ``now``, it is a dead letter
    ``ts_out_of_range``. One wrong clock would otherwise move its partition's watermark past every
    deadline and window, start a deploy's period in the future, pin a grade that no later correction
    could replace (the latest ``ts`` wins), or start a stream's event time in year 1.

    >>> from monitor.core.events import Annotation, Deploy
    >>> clock_error(Deploy("deploy", "r", 0.0), 1.8e9, StreamConfig()).code
    'ts_out_of_range'
    >>> clock_error(Annotation((), "s", None, 1.9e9), 1.8e9, StreamConfig()).reason
    'out of range: 100000000 s ahead of the wall clock (max_future is 86400 s)'
    >>> clock_error(Annotation((), "s", None, None), 1.8e9, StreamConfig()) is None
    True
    """
    ts = event.ts
    if now is None or ts is None:
        return None
    if ts < EARLIEST_TS:
        return EventError("ts", f"out of range: {ts:.0f} is before 2000-01-01 (epoch seconds "
                                f"{EARLIEST_TS:.0f}, the earliest event time accepted)", "ts_out_of_range")
    if ts <= now + config.max_future:
        return None
    ahead = ts - now
    shown = f"{ahead:.0f}" if ahead < 1e12 else f"{ahead:.3g}"
    return EventError("ts", f"out of range: {shown} s ahead of the wall clock "
                            f"(max_future is {config.max_future:g} s)", "ts_out_of_range")


@lru_cache(maxsize=16)
def ranker_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def undeclared(event: Impression, config: StreamConfig) -> tuple[str, str] | None:
    """Which part of an impression is not declared, as (reason, what the settings declare): ``variant``
    if its variant (``control`` when it has none) is not one of ``variants`` (empty: any variant is),
    else ``ranker`` if its ranker does not match ``ranker_pattern`` in full; None if both are declared.

    >>> config = StreamConfig(ranker_pattern="ranker-[0-9]+")
    >>> undeclared(Impression("s", "q", "ranker-1", 0.0, (), variant="exp-7"), config)
    ('variant', 'control, canary')
    >>> undeclared(Impression("s", "q", "ranker-x", 0.0, ()), config)
    ('ranker', 'ranker-[0-9]+')
    >>> undeclared(Impression("s", "q", "ranker-1", 0.0, (), variant="canary"), config) is None
    True
    """
    if config.variants and (event.variant or "control") not in config.variants:
        return "variant", ", ".join(config.variants)
    pattern = config.ranker_pattern
    if pattern is not None and ranker_regex(pattern).fullmatch(event.ranker) is None:
        return "ranker", pattern
    return None


def undeclared_value(event: Impression, config: StreamConfig) -> tuple[str, str] | None:
    """Which part of an impression is not declared, and its value: ``("variant", "exp-7")``,
    ``("ranker", "build-7f3a")`` (:func:`undeclared`), for a summary or a log line that names it; None
    if both are declared.

    >>> undeclared_value(Impression("s", "q", "r1", 0.0, (), variant="exp-7"), StreamConfig())
    ('variant', 'exp-7')
    """
    found = undeclared(event, config)
    if found is None:
        return None
    return (found[0], event.variant or "control") if found[0] == "variant" else (found[0], event.ranker)


def declared_shadow(event: Event, config: StreamConfig) -> tuple[Event, int]:
    """``event`` without the shadow lists whose ranker does not match ``ranker_pattern`` in full, and
    how many were dropped (each is counted as ``undeclared`` with the reason ``shadow_ranker``). With
    either ``undeclared`` setting a shadow list is only dropped: a candidate's list never makes the served
    impression a dead letter. Without a pattern every shadow ranker is declared.

    >>> from monitor.core.events import Result, ShadowList
    >>> shown = (Result("d1", 1),)
    >>> event = Impression("s", "q", "ranker-1", 0.0, shown,
    ...                    shadow=(ShadowList("ranker-2", shown), ShadowList("build-7f3a", shown)))
    >>> kept, dropped = declared_shadow(event, StreamConfig(ranker_pattern="ranker-[0-9]+"))
    >>> [s.ranker for s in kept.shadow], dropped
    (['ranker-2'], 1)
    """
    pattern = config.ranker_pattern
    if pattern is None or not isinstance(event, Impression) or not event.shadow:
        return event, 0
    regex = ranker_regex(pattern)
    kept = tuple(s for s in event.shadow if regex.fullmatch(s.ranker) is not None)
    if len(kept) == len(event.shadow):
        return event, 0
    return msgspec.structs.replace(event, shadow=kept), len(event.shadow) - len(kept)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 64 else f"{text[:61]!r}..."


def undeclared_error(event: Event, config: StreamConfig) -> EventError | None:
    """With ``undeclared = "dead_letter"``: an impression whose variant or ranker is not declared
    (:func:`undeclared`) is a dead letter ``undeclared_variant`` or ``undeclared_ranker`` (with
    ``undeclared = "other"`` the step counts it as ``other`` instead, in :mod:`monitor.core.stream.join`)."""
    if config.undeclared != "dead_letter" or not isinstance(event, Impression):
        return None
    found = undeclared(event, config)
    if found is None:
        return None
    reason, declared = found
    if reason == "variant":
        return EventError("variant", f"undeclared variant {_shown(event.variant or 'control')}: the "
                                     f"declared variants are {declared} (setting variants)",
                          code="undeclared_variant")
    return EventError("ranker", f"undeclared ranker {_shown(event.ranker)}: it does not match "
                                f"ranker_pattern {declared!r}", code="undeclared_ranker")


def past_error(event: Event, watermark: float, config: StreamConfig) -> EventError | None:
    """An impression older than ``state_ttl`` behind its partition's watermark is a dead letter
    ``ts_out_of_range``: its session would be forgotten before it could be labelled, and it would
    spend the budget meant for live traffic."""
    if not isinstance(event, Impression) or not math.isfinite(watermark):
        return None
    if event.ts >= watermark - config.state_ttl:
        return None
    return EventError("ts", f"out of range: {watermark - event.ts:.0f} s behind its partition's event time "
                            f"(state_ttl is {config.state_ttl:g} s)", "ts_out_of_range")
