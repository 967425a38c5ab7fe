"""Simulated annotators over the simulator's true grades, for the rater-quality checks (issue 30).

Every (query, document) pair to grade is drawn from the simulator's own latent pools
(:mod:`monitor.sim.relevance`, through :class:`SimConfig`'s vocabulary and traffic), with its true level
0..3 and its bucket. A panel of :class:`RaterSpec` annotators grades them:

* ``honest``: the true level, one step off (up or down at random, kept on the scale) with probability
  ``noise``;
* ``careless``: a level drawn uniformly, whatever the document;
* ``drifting``: honest, plus a bias of ``drift_per_hour`` levels per hour of the run (fractional biases
  move a grade one more step with their fractional probability; negative: ever harsher).

:func:`run_panel` plays the annotation loop of docs/annotate.md, "Rater quality": each pair goes to one
annotator at random; the pairs in the overlap (``policy.in_share`` of the pair key, ``overlap_share``) to
a second one, and, when the two differ by more than ``max_gap``, to a third (``policy.needs_third``);
gold tasks (``policy.gold_to_add``: ``gold_share`` of all tasks) with known grades go to annotators at
random. Agreement is counted on each overlapped pair's first two grades (``policy.measured``), the grade
that counts is ``policy.chosen_grade``. The result is a :class:`RaterTally` and how well the chosen
grades match the truth. Deterministic for a seed.

>>> run = run_panel(PanelConfig(raters=honest_panel(4), pairs=2000, seed=1))
>>> run.tally.overall().alpha("ordinal") > 0.8, run.gold_tasks
(True, 106)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.core.agreement.policy import chosen_grade, gold_to_add, in_share, measured, needs_third
from monitor.core.agreement.tally import RaterTally
from monitor.sim.config import SimConfig
from monitor.sim.queries import build_vocabulary
from monitor.sim.relevance import draw_pools

LEVELS = 4
RATER_KINDS = ("honest", "careless", "drifting")
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RaterSpec:
    """One simulated annotator (module docstring).

    >>> RaterSpec("r1", kind="lazy")
    Traceback (most recent call last):
    ...
    ValueError: kind: 'lazy' is not one of honest, careless, drifting
    """

    name: str
    kind: str = "honest"
    noise: float = 0.2
    drift_per_hour: float = 0.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name: must not be empty")
        if self.kind not in RATER_KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {', '.join(RATER_KINDS)}")
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"noise: must be in [0, 1], got {self.noise}")
        if not math.isfinite(self.drift_per_hour):
            raise ValueError(f"drift_per_hour: must be finite, got {self.drift_per_hour}")

    def rate(self, true: IntArray, hours: FloatArray, rng: np.random.Generator) -> IntArray:
        """This annotator's grades of documents whose true levels are ``true``, at ``hours`` into the run."""
        if self.kind == "careless":
            return rng.integers(0, LEVELS, size=true.shape).astype(np.int64)
        off = rng.random(true.shape) < self.noise
        step = np.where(rng.random(true.shape) < 0.5, -1, 1)
        grades = true + np.where(off, step, 0)
        if self.kind == "drifting":
            bias = self.drift_per_hour * hours
            whole = np.floor(bias)
            grades = grades + whole.astype(np.int64) + (rng.random(true.shape) < bias - whole)
        return np.clip(grades, 0, LEVELS - 1).astype(np.int64)


def honest_panel(size: int, noise: float = 0.2) -> tuple[RaterSpec, ...]:
    """``size`` honest annotators ``r1`` … ``rN``."""
    return tuple(RaterSpec(f"r{i + 1}", noise=noise) for i in range(size))


@dataclass(frozen=True)
class PanelConfig:
    """One run of the annotation loop: ``pairs`` distinct pairs over ``hours`` hours."""

    raters: tuple[RaterSpec, ...]
    pairs: int = 20_000
    hours: float = 1.0
    overlap_share: float = 0.1
    gold_share: float = 0.05
    max_gap: int = 1
    seed: int = 0
    world: SimConfig = field(default_factory=SimConfig)

    def __post_init__(self) -> None:
        if len(self.raters) < 3:
            raise ValueError(f"raters: a third opinion needs at least 3 annotators, got {len(self.raters)}")
        if len({r.name for r in self.raters}) != len(self.raters):
            raise ValueError("raters: names must be distinct")
        if self.pairs < 1 or not self.hours > 0:
            raise ValueError(f"pairs and hours must be positive, got {self.pairs}, {self.hours}")


@dataclass
class PanelRun:
    """What a run produced: the tally, and the pairs' true and chosen grades (``chosen`` from every grade
    the pair got, ``policy.chosen_grade``), how many were overlapped and how many needed a third grade."""

    tally: RaterTally
    true: IntArray
    chosen: IntArray
    overlapped: int
    thirds: int
    gold_tasks: int

    def chosen_exact(self) -> float:
        """The share of pairs whose chosen grade is the true one."""
        return float(np.mean(self.true == self.chosen))


def draw_pairs(world: SimConfig, count: int, rng: np.random.Generator
               ) -> tuple[list[str], list[str], IntArray]:
    """``count`` distinct (query, document) pairs as traffic asks for them: keys ``query|doc``, buckets and
    true levels (a query drawn by its traffic share, then one of its pool's documents)."""
    vocabulary = build_vocabulary(world, rng)
    pools = draw_pools(world, vocabulary, rng)
    total = sum(len(levels) for levels in pools.levels)
    if count > total:
        raise ValueError(f"pairs: the world has {total} (query, document) pairs, {count} asked")
    keys: list[str] = []
    buckets: list[str] = []
    levels: list[int] = []
    seen: set[tuple[int, int]] = set()
    while len(keys) < count:
        for query in vocabulary.sample(rng, count - len(keys)).tolist():
            doc = int(rng.integers(len(pools.levels[query])))
            if (query, doc) in seen:
                continue
            seen.add((query, doc))
            keys.append(f"{vocabulary.texts[query]}|{pools.doc_ids(query)[doc]}")
            buckets.append(vocabulary.buckets[query])
            levels.append(int(pools.levels[query][doc]))
    return keys, buckets, np.asarray(levels, dtype=np.int64)


def _grades(raters: tuple[RaterSpec, ...], who: IntArray, true: IntArray, hours: FloatArray,
            rng: np.random.Generator) -> IntArray:
    """Each task's grade by the annotator ``who`` assigns it."""
    out = np.empty_like(true)
    for index, rater in enumerate(raters):
        mine = who == index
        out[mine] = rater.rate(true[mine], hours[mine], rng)
    return out


def run_panel(config: PanelConfig) -> PanelRun:
    """Play the annotation loop of the module docstring once."""
    rng = np.random.default_rng(config.seed)
    raters, count = config.raters, len(config.raters)
    keys, buckets, true = draw_pairs(config.world, config.pairs, rng)
    hours = rng.random(config.pairs) * config.hours
    first = rng.integers(0, count, config.pairs)
    second = (first + 1 + rng.integers(0, count - 1, config.pairs)) % count
    grades_1 = _grades(raters, first, true, hours, rng)
    grades_2 = _grades(raters, second, true, hours, rng)
    tally = RaterTally(LEVELS)
    chosen = grades_1.copy()
    overlapped = thirds = 0
    for i, key in enumerate(keys):
        if not in_share(key, config.overlap_share, "overlap"):
            continue
        overlapped += 1
        given = [int(grades_1[i]), int(grades_2[i])]
        names = [raters[first[i]].name, raters[second[i]].name]
        if needs_third(given, config.max_gap):
            thirds += 1
            others = [r for r in range(count) if r not in (first[i], second[i])]
            third = others[int(rng.integers(len(others)))]
            given.append(int(raters[third].rate(true[i:i + 1], hours[i:i + 1], rng)[0]))
            names.append(raters[third].name)
        tally.add_unit(buckets[i], dict(zip(names[:2], measured(given), strict=True)))
        chosen[i] = chosen_grade(given)
    gold_tasks = gold_to_add(config.pairs, 0, config.gold_share)
    _, _, known = draw_pairs(config.world, gold_tasks, np.random.default_rng([config.seed, 1]))
    who = rng.integers(0, count, gold_tasks)
    answers = _grades(raters, who, known, rng.random(gold_tasks) * config.hours, rng)
    for rater, k, a in zip(who.tolist(), known.tolist(), answers.tolist(), strict=True):
        tally.add_gold(raters[rater].name, k, a)
    return PanelRun(tally, true, chosen, overlapped, thirds, gold_tasks)
