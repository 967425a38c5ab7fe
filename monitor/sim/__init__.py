"""A deterministic, seeded traffic simulator for the search-relevance monitor.

It produces what the monitor consumes (impression sessions, annotations and deploys as raw event values,
schema v1 of ``docs/events.md``), and the ground truth to check the monitor against: what every session
showed, the latent grades and the final labels. Pure: no clock (times derive from ``start_ts``), no I/O
except :func:`write_jsonl`.

>>> result = Simulation(SimConfig(n_sessions=50, seed=7)).run()
>>> result.events[0].value.decode()
'{"type":"deploy","schema":1,"kind":"deploy","ranker":"ranker-a","ts":1763712000.0}'
>>> sorted({e.topic for e in result.events})
['annotations', 'deploys', 'impressions']
>>> len(result.sessions)
50

Modules: ``config`` (settings), ``queries`` (vocabulary and traffic shares), ``clock`` (a query mix that
follows the time of day), ``relevance`` (latent grades), ``rankers`` (model scores), ``regression`` (the
degraded canary or newly deployed ranker), ``labels`` (annotation arrival), ``invalid`` (malformed
records), ``traffic`` (the generator: a canary, or a deploy without one), ``records`` (the output record),
``shadow`` (the lists of shadow candidates, ``SimConfig.shadow``), ``truth`` (ground truth), ``jsonl``
(the file writer).
"""

from __future__ import annotations

from collections.abc import Iterator

from monitor.sim.config import BUCKETS, ShadowSpec, SimConfig
from monitor.sim.invalid import KINDS as INVALID_KINDS
from monitor.sim.jsonl import write_jsonl
from monitor.sim.records import TOPICS, SimEvent
from monitor.sim.regression import dcg_of_levels
from monitor.sim.traffic import SimResult, Simulation
from monitor.sim.truth import GroundTruth, SessionTruth


def generate(config: SimConfig | None = None) -> Iterator[SimEvent]:
    """Stream the records of a run in delivery-time order (``Simulation(config).events()``)."""
    return Simulation(config).events()


def simulate(config: SimConfig | None = None) -> SimResult:
    """A whole run with its ground truth (``Simulation(config).run()``)."""
    return Simulation(config).run()


__all__ = [
    "BUCKETS",
    "INVALID_KINDS",
    "TOPICS",
    "GroundTruth",
    "SessionTruth",
    "ShadowSpec",
    "SimConfig",
    "SimEvent",
    "SimResult",
    "Simulation",
    "dcg_of_levels",
    "generate",
    "simulate",
    "write_jsonl",
]
