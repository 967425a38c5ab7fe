"""Deploys the impressions show but no ``deploy`` event names, which :mod:`.pairing` compares too.

A ranker R whose first plain impression lies in a later epoch than the first of some other plain ranker,
which has served for at least one epoch since (a stray impression is not a deploy), and which no
``deploy`` event names, was deployed without an event: a ``deploy`` of R at its first impression is
assumed, its ``previous`` being the plain ranker seen most recently before it (last seen in R's first
epoch or the one before; ties: by name). Rankers present from the first epoch are never "detected".

:func:`every_deploy` is the deploy events and the detected deploys together, by time: what the canary
collector and the alerts show.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.core.events import Deploy
from monitor.core.stream.history import History


def detect_deploys(history: History, deploys: Sequence[Deploy]) -> list[Deploy]:
    """The deploys the impressions show but no ``deploy`` event names (module docstring), by time."""
    named = {d.ranker for d in deploys if d.kind == "deploy"}
    plain = {ranker: span for (arm, ranker), span in history.seen.items() if arm == "plain"}
    out = []
    for ranker, (first, last) in sorted(plain.items()):
        if ranker in named or last - first < history.width:
            continue
        epoch = history.epoch(first)
        before = [(last, other) for other, (other_first, last) in plain.items()
                  if other != ranker and history.epoch(other_first) < epoch
                  and history.epoch(last) >= epoch - 1]
        if before:
            previous = min(before, key=lambda item: (-item[0], item[1]))[1]
            out.append(Deploy("deploy", ranker, first, previous=previous))
    return sorted(out, key=lambda d: (d.ts, d.ranker))


def every_deploy(history: History, deploys: Sequence[Deploy]) -> list[Deploy]:
    """The deploy events and the deploys detected in ``history`` (:func:`detect_deploys`), by time (equal
    times: events first, as given)."""
    return sorted([*deploys, *detect_deploys(history, deploys)], key=lambda d: d.ts)
