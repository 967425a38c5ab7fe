"""How the Redis writer decodes a batch's messages: with or without an impression's results.

Most impressions of real traffic are only counted (``PartitionState.count_only``): their results (30 or so
``Result`` objects, their ids and scores, ~90 objects) are checked and never read. Kept for a whole batch
of thousands of messages, those objects are out of the cache by the time the batch is freed: freeing them
was ~9% of the worker's CPU in the realistic world, and decoding them a quarter. So :class:`BatchDecoder`
decodes impressions *without* their results (``admit(results=False)``: the same checks, the same errors),
and :meth:`BatchDecoder.shown` decodes one again, with its results, when the full step must run.

Where most impressions take the full step (every session sampled, as in the annotation-heavy world),
decoding twice would cost more than it saves: the decoder keeps the results while more than
:data:`KEEP_ABOVE` of the last batch's impressions took the full step. Either way each message gives the
same event (the same bytes decode to the same event); only the work differs.
"""

from __future__ import annotations

from collections.abc import Callable

from monitor.core.events import Event, EventError, Impression, Limits
from monitor.core.grades import Scale
from monitor.core.stream.admission import admit, readmit, undeclared_value
from monitor.core.stream.config import StreamConfig
from monitor.store.batch import Message

MAX_UNDECLARED_NAMED = 100  # undeclared variant or ranker values named in the log (the counter counts all)
KEEP_ABOVE = 0.25
"""The share of a batch's impressions taking the full step above which the next batch is decoded with its
results (decoding one again costs about what not keeping the results of three or four saves)."""


class BatchDecoder:
    """The writer's decoding: :meth:`decode` per message, :meth:`shown` for an impression the full step
    takes, :meth:`learn` once per batch."""

    def __init__(self, scale: Scale, config: StreamConfig, limits: Limits,
                 clock: Callable[[], float | None]) -> None:
        self.scale, self.config, self.limits, self.clock = scale, config, limits, clock
        self.keep_results = False
        # an undeclared variant or ranker value admitted for the first time, as (reason, value): the
        # worker logs each once and empties the list (the first MAX_UNDECLARED_NAMED values)
        self.undeclared_new: list[tuple[str, str]] = []
        self._undeclared_seen: set[tuple[str, str]] = set()

    def decode(self, message: Message) -> Event | EventError:
        """The message's event (an impression without its results unless :attr:`keep_results`), or why
        it is a dead letter (invalid, on the wrong topic, undeclared, ahead of the wall clock)."""
        try:
            event = admit(message.raw, message.role, self.scale, self.config, self.clock(), self.limits,
                          results=self.keep_results)
        except EventError as invalid:
            return invalid
        if isinstance(event, Impression) and len(self._undeclared_seen) < MAX_UNDECLARED_NAMED:
            seen = undeclared_value(event, self.config)
            if seen is not None and seen not in self._undeclared_seen:
                self._undeclared_seen.add(seen)
                self.undeclared_new.append(seen)
        return event

    def shown(self, message: Message, event: Impression) -> Event:
        """``event`` (the message's, from :meth:`decode`) with its results, for the full step."""
        return event if event.results else readmit(message.raw, self.scale, self.config, self.limits)

    def learn(self, impressions: int, full: int) -> None:
        """A batch had ``impressions`` admitted and ``full`` of them took the full step: how to decode the
        next one."""
        if impressions:
            self.keep_results = full > KEEP_ABOVE * impressions
