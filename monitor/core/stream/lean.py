"""What every impression adds, and the impressions that add nothing more: most of real traffic.

An impression that is declared and not a duplicate adds one to its group's ``impressions`` counter, one to
its query's cells in the frequency sketch, and to the canary history its (arm, ranker, ts) and one to its
group's ``impressions`` in the epoch of its ``ts`` (:class:`Counted`);
:func:`~monitor.core.stream.join.step` does that first for each one. One that is not
sampled either (:func:`only_counted`) adds nothing else, so a store can take it without the full step
(``PartitionState.count_only``, used by the Redis writer for most of its messages).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from monitor.core.events import Impression
from monitor.core.stream.admission import undeclared
from monitor.core.stream.config import StreamConfig
from monitor.core.stream.sampling import budget_period, sampled_by
from monitor.core.stream.sketch import cell_fields, classify, estimate_fields


def frequency_fields(query: str, config: StreamConfig) -> tuple[str, ...]:
    """The sketch fields of the query's cells (``join.frequency_cells``)."""
    return cell_fields(query, config.sketch_width, config.sketch_depth)


class Counted(NamedTuple):
    """What every declared impression that is not a duplicate adds: one to its group's ``impressions``,
    one to each of its query's cells (``fields``) in the sketch's ``slice``, and to the canary history
    ``seen`` (arm, ranker, ts) and one to the group's ``impressions`` in the epoch ``epoch`` (the
    ``Transition.impression`` of the full step)."""

    bucket: str
    variant: str
    group: str
    slice: int
    fields: tuple[str, ...]
    seen: tuple[str, str, float]
    epoch: int


def counted_impression(event: Impression, sketch: Sequence[Mapping[str, float]], config: StreamConfig,
                       partitions: int) -> Counted:
    """What ``event`` adds (its bucket carried, or estimated from the ``sketch`` slices)."""
    fields = cell_fields(event.query, config.sketch_width, config.sketch_depth)  # (frequency_fields)
    bucket = event.query_bucket or classify(estimate_fields(fields, sketch) * partitions,
                                            config.head_min_frequency, config.torso_min_frequency)
    variant, ts = event.variant or "control", event.ts
    # slice_index, arm_of and epoch_of inline: this runs for every impression counted
    return Counted(bucket, variant, f"{bucket}|{event.ranker}|{variant}",
                   math.floor(ts / (config.frequency_window / config.frequency_slices)), fields,
                   ("canary" if variant == "canary" else "plain", event.ranker, ts),
                   math.floor(ts / config.epoch))


def only_counted(event: Impression, sketch: Sequence[Mapping[str, float]],
                 budget: Mapping[tuple[str, int], float], config: StreamConfig,
                 partitions: int) -> Counted | None:
    """What :func:`~monitor.core.stream.join.step` does with an impression it only counts (most of real
    traffic: a declared impression that is not sampled, by
    :func:`~monitor.core.stream.sampling.sampled_by`), or None when the step must run. ``sketch``: the
    frequency slices (read only without ``query_bucket``); ``budget``: (bucket, period) → spent on the
    partition. The caller has checked the rest of what
    makes the step do more: no record of the session (a duplicate), no early labels of it (they would be
    dropped), no session due to close by the new watermark. The transition is then exactly: the
    watermark, ``impressions`` += 1 (the counter, and in the epoch: ``impression``), the sketch cells and
    ``seen`` (tests/unit/test_only_counted.py compares it with :func:`~monitor.core.stream.join.step`)."""
    if undeclared(event, config) is not None:
        return None
    counted = counted_impression(event, sketch, config, partitions)
    bucket, ts = counted.bucket, event.ts
    spent = budget.get((bucket, budget_period(ts, config)), 0.0)
    return None if sampled_by(bucket, ts, spent, config, partitions) else counted
