"""Running a stream in process and picking out the relevance series and scored sessions, for the worker input
tests.
"""

from __future__ import annotations

from collections.abc import Iterable

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.sim.records import SimEvent
from monitor.store.memory import MemoryPipeline
from tests.support.worker_e2e import CONFIG, exported
from tests.support.worker_harness import Samples

NOT_RELEVANCE = ("search_relevance_canary_", "search_relevance_deploy_", "search_relevance_dead_letters")


def relevance(samples: Samples) -> Samples:
    """The relevance series (windows, counters, session statistics): not the canary verdicts, which the
    test of the canary covers, nor the dead letters, compared with the corpus instead."""
    return {key: value for key, value in samples.items() if not key[0].startswith(NOT_RELEVANCE)}


def in_process(records: Iterable[SimEvent], partitions: int) -> Samples:
    """What the in-process core (``MemoryPipeline``, Kafka's partitioner) exports for valid ``records``,
    in order: the relevance series only. Fails if one of them is not a valid event."""
    memory = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=partitions)
    for record in records:
        memory.submit(record.topic, record.key, record.value)
    assert not memory.dead_letters, memory.dead_letters[0]
    return relevance(exported(memory))


def scored_sessions(samples: Samples) -> float:
    """Sessions scored in the 24h window, over every group."""
    return sum(v for (n, labels), v in samples.items()
               if n == "search_relevance_sessions_scored" and ("window", "24h") in labels)
