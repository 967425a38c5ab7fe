"""The simulator's settings: one frozen value, validated at construction.

Every knob of the traffic (vocabulary, rankers, canary or deploy, regression, the time-of-day query mix,
labels, invalid events) lives here; a bad value raises :class:`ValueError` naming the field. Times are
seconds; shares and probabilities are fractions in [0, 1].

>>> SimConfig(n_sessions=10).session_count
10
>>> SimConfig(duration_s=60, sessions_per_second=2.5).session_count
150
>>> SimConfig(canary_share=1.5)
Traceback (most recent call last):
...
ValueError: canary_share: must be in [0, 1], got 1.5
>>> SimConfig(duration_s=3600, deploy_at=0.25).deploy_ts - SimConfig().start_ts
900.0
>>> SimConfig(regression_kind="irrelevant", regression=1.0).regression
1.0
>>> SimConfig(regression_kind="empty")
Traceback (most recent call last):
...
ValueError: regression_kind: 'empty' is not one of flip, irrelevant
>>> SimConfig(shadow=(ShadowSpec("ranker-a"),))
Traceback (most recent call last):
...
ValueError: shadow: 'ranker-a' is a served ranker (control_ranker or canary_ranker)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from monitor.core.events import DEFAULT_LIMITS

BUCKETS = ("head", "torso", "tail")
REGRESSION_BUCKETS = (*BUCKETS, "all")
REGRESSION_KINDS = ("flip", "irrelevant")
DEFAULT_SESSIONS = 2000
DEFAULT_START_TS = 1_763_712_000.0  # 2025-11-21T08:00:00Z
DAY_S = 86400.0

MAX_SHADOW = DEFAULT_LIMITS.max_shadow_lists

Probabilities = tuple[float, float, float, float]


@dataclass(frozen=True)
class ShadowSpec:
    """A shadow candidate: a ranker whose list for each request is computed in shadow and sent with the
    impression (its ``shadow`` field, docs/events.md), never shown.

    Its list follows the served ranker's *healthy* scores (before any simulated regression of the served
    list), mixed with a view of its own (:mod:`monitor.sim.shadow`): as good as the served ranker in
    expectation, its top k sharing more of the served top k the higher ``agreement`` (in [0, 1); 0.5, the
    default, shares about 85% of a healthy list on average with the default pools, rarely under 70%, never
    under half). ``drop`` degrades it in ``bucket`` (one of the buckets, or ``all``) the way ``kind`` says,
    as ``SimConfig.regression`` degrades the canary (:mod:`monitor.sim.regression`): ``"flip"``, a relative
    loss of mean DCG@k in [0, 1) against its healthy list; ``"irrelevant"``, the probability in [0, 1] of a
    list of only irrelevant documents (1: a broken candidate). ``share``: the probability that an
    impression carries this candidate's list.
    """

    ranker: str
    drop: float = 0.0
    bucket: str = "all"
    kind: str = "flip"
    agreement: float = 0.5
    share: float = 1.0

    def regressed(self, bucket: str) -> bool:
        return self.drop > 0 and self.bucket in (bucket, "all")


@dataclass(frozen=True)
class SimConfig:
    """Settings of one simulated run (all fields have defaults; ``SimConfig()`` is a quick 2,000-session run).

    Session count: ``n_sessions``, or ``duration_s × sessions_per_second``; at most one of the two
    (neither: 2,000). Grade mixes are probabilities of levels 0..3 (无, 低, 中, 高), before each query's
    own Dirichlet variation (``grade_concentration``: larger means queries closer to their bucket's mix).

    Two scenarios: a **canary** (the default: ``canary_ranker`` serves ``canary_share`` of the traffic
    from ``canary_start`` on, as ``variant: "canary"``), or, with ``deploy_at`` set, a **deploy** without a
    canary: ``control_ranker`` serves all traffic until ``deploy_ts``, then ``canary_ranker`` (the new
    ranker) serves all of it, with a ``deploy`` event (``previous``: the control ranker) at that time; all
    impressions are plain (no ``variant``) and ``canary_start`` / ``canary_share`` are not used. In both,
    ``regression`` degrades the new ranker in ``regression_bucket`` (one of the buckets, or ``all``), in
    the way ``regression_kind`` says (:mod:`monitor.sim.regression`):

    * ``"flip"`` (the default): ``regression`` is the relative loss of mean DCG@k, in [0, 1): now and then
      a session gets the list of the ranker with its relevance signal flipped, as often as that loss needs;
    * ``"irrelevant"``: ``regression`` is the probability, in [0, 1] (1: every session), that a session of
      the new ranker shows only its query's irrelevant documents (latent grade 0, 无), by the ranker's
      own noisy scores, as many as the pool has up to the bucket's ``top_n``: a ranker returning nothing
      relevant. An impression needs at least one result, so a query whose pool has no grade-0 document
      shows its lowest-graded documents instead.

    ``night_dip`` > 0 makes the query mix follow the clock (:mod:`monitor.sim.clock`): within each bucket
    hard queries (low expected DCG) are searched more at night, so that a ranker's expected mean DCG@k is
    the daily mean × (1 − night_dip · cos(2π (t − dip_hour) / 24 h)): ``night_dip`` lower at ``dip_hour``
    (UTC, of event time), as much higher twelve hours later, the daily mean unchanged.
    """

    seed: int = 0
    n_sessions: int | None = None
    sessions_per_second: float | None = None
    duration_s: float = 3600.0
    start_ts: float = DEFAULT_START_TS
    id_prefix: str = "s"
    # vocabulary and traffic
    n_head: int = 20
    n_torso: int = 300
    n_tail: int = 5000
    head_share: float = 0.5
    torso_share: float = 0.3
    tail_share: float = 0.2
    zipf_head: float = 1.0
    zipf_torso: float = 0.4
    zipf_tail: float = 0.2
    bucket_hint_share: float = 0.8
    # documents and rankers
    pool_head: int = 60
    pool_other: int = 30
    top_n_head: int = 40
    top_n_other: int = 20
    grades_head: Probabilities = (0.15, 0.20, 0.30, 0.35)
    grades_torso: Probabilities = (0.25, 0.30, 0.25, 0.20)
    grades_tail: Probabilities = (0.40, 0.30, 0.20, 0.10)
    grade_concentration: float = 8.0
    score_weight: float = 1.0
    doc_noise: float = 0.6
    session_noise: float = 0.5
    control_ranker: str = "ranker-a"
    canary_ranker: str = "ranker-b"
    # canary and regression
    canary_start: float = 0.3
    canary_share: float = 0.5
    regression: float = 0.10
    regression_bucket: str = "tail"
    regression_kind: str = "flip"
    # a deploy without a canary (fraction of the duration; None: the canary scenario)
    deploy_at: float | None = None
    # the query mix over the day
    night_dip: float = 0.0
    dip_hour: float = 3.0
    # labels
    label_share: float = 0.9
    label_k_head: int = 40
    label_k_other: int = 20
    label_coverage: float = 1.0
    label_delay_mean_s: float = 120.0
    early_label_prob: float = 0.02
    early_label_max_s: float = 10.0
    batch_share: float = 0.5
    duplicate_prob: float = 0.05
    redelivery_mean_s: float = 30.0
    correction_prob: float = 0.03
    query_judgment_share: float = 0.05
    # malformed records
    invalid_rate: float = 0.0
    # shadow candidates (at most 4): their lists ride on the impressions, never shown
    shadow: tuple[ShadowSpec, ...] = ()

    def __post_init__(self) -> None:
        _check(self)

    @property
    def session_count(self) -> int:
        if self.sessions_per_second is not None:
            return max(1, round(self.duration_s * self.sessions_per_second))
        return DEFAULT_SESSIONS if self.n_sessions is None else self.n_sessions

    @property
    def canary_ts(self) -> float:
        """When the canary starts (and the ``canary_start`` deploy event is emitted)."""
        return self.start_ts + self.canary_start * self.duration_s

    @property
    def deploy_ts(self) -> float | None:
        """When the new ranker replaces the control ranker (deploy scenario); None in a canary run."""
        return None if self.deploy_at is None else self.start_ts + self.deploy_at * self.duration_s

    def share(self, bucket: str) -> float:
        return {"head": self.head_share, "torso": self.torso_share, "tail": self.tail_share}[bucket]

    def zipf(self, bucket: str) -> float:
        return {"head": self.zipf_head, "torso": self.zipf_torso, "tail": self.zipf_tail}[bucket]

    def vocabulary_size(self, bucket: str) -> int:
        return {"head": self.n_head, "torso": self.n_torso, "tail": self.n_tail}[bucket]

    def grade_mix(self, bucket: str) -> Probabilities:
        return {"head": self.grades_head, "torso": self.grades_torso, "tail": self.grades_tail}[bucket]

    def pool_size(self, bucket: str) -> int:
        return self.pool_head if bucket == "head" else self.pool_other

    def top_n(self, bucket: str) -> int:
        return self.top_n_head if bucket == "head" else self.top_n_other

    def label_k(self, bucket: str) -> int:
        return self.label_k_head if bucket == "head" else self.label_k_other

    def regressed(self, bucket: str) -> bool:
        return self.regression > 0 and self.regression_bucket in (bucket, "all")


_FRACTIONS = ("head_share", "torso_share", "tail_share", "bucket_hint_share", "canary_share", "label_share",
              "label_coverage", "early_label_prob", "batch_share", "duplicate_prob", "correction_prob",
              "query_judgment_share")
_POSITIVE_INTS = ("n_head", "n_torso", "n_tail", "pool_head", "pool_other", "top_n_head", "top_n_other",
                  "label_k_head", "label_k_other")
_POSITIVE = ("duration_s", "grade_concentration", "score_weight", "label_delay_mean_s", "redelivery_mean_s")
_NON_NEGATIVE = ("zipf_head", "zipf_torso", "zipf_tail", "doc_noise", "session_noise", "early_label_max_s",
                 "start_ts")


def _fail(name: str, reason: str) -> None:
    raise ValueError(f"{name}: {reason}")


def _number(config: SimConfig, name: str) -> float:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(name, f"expected a finite number, got {value!r}")
    return float(value)


def _check(config: SimConfig) -> None:
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
        _fail("seed", f"expected a non-negative integer, got {config.seed!r}")
    for name in _FRACTIONS:
        if not 0.0 <= _number(config, name) <= 1.0:
            _fail(name, f"must be in [0, 1], got {getattr(config, name)!r}")
    for name in _POSITIVE_INTS:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            _fail(name, f"expected a positive integer, got {value!r}")
    for name in _POSITIVE:
        if _number(config, name) <= 0:
            _fail(name, f"must be > 0, got {getattr(config, name)!r}")
    for name in _NON_NEGATIVE:
        if _number(config, name) < 0:
            _fail(name, f"must be ≥ 0, got {getattr(config, name)!r}")
    if config.n_sessions is not None and config.sessions_per_second is not None:
        _fail("n_sessions", "give n_sessions or sessions_per_second, not both")
    if config.n_sessions is not None and (
        isinstance(config.n_sessions, bool) or not isinstance(config.n_sessions, int) or config.n_sessions < 1
    ):
        _fail("n_sessions", f"expected a positive integer, got {config.n_sessions!r}")
    if config.sessions_per_second is not None and _number(config, "sessions_per_second") <= 0:
        _fail("sessions_per_second", f"must be > 0, got {config.sessions_per_second!r}")
    total = config.head_share + config.torso_share + config.tail_share
    if not math.isclose(total, 1.0, abs_tol=1e-9):
        _fail("tail_share", f"head_share + torso_share + tail_share must be 1, got {total:g}")
    for bucket in BUCKETS:
        _check_mix(f"grades_{bucket}", config.grade_mix(bucket))
    for name, pool, top in (("top_n_head", config.pool_head, config.top_n_head),
                            ("top_n_other", config.pool_other, config.top_n_other)):
        if top > pool:
            _fail(name, f"{top} is more than the candidate pool ({pool})")
        if top > 200:
            _fail(name, f"{top} results is more than the event limit of 200")
    if config.pool_head > 1000 or config.pool_other > 1000:
        _fail("pool_head" if config.pool_head > 1000 else "pool_other",
              "a query judgment batch holds at most 1,000 grades")
    if not 0.0 <= _number(config, "canary_start") < 1.0:
        _fail("canary_start", f"must be in [0, 1), got {config.canary_start!r}")
    if config.regression_kind not in REGRESSION_KINDS:
        _fail("regression_kind", f"{config.regression_kind!r} is not one of {', '.join(REGRESSION_KINDS)}")
    if config.regression_kind == "irrelevant":
        if not 0.0 <= _number(config, "regression") <= 1.0:
            _fail("regression", f"must be in [0, 1] (the share of sessions shown only irrelevant documents), "
                                f"got {config.regression!r}")
    elif not 0.0 <= _number(config, "regression") < 1.0:
        _fail("regression", f"must be in [0, 1), got {config.regression!r}")
    if config.regression_bucket not in REGRESSION_BUCKETS:
        _fail("regression_bucket",
              f"{config.regression_bucket!r} is not one of {', '.join(REGRESSION_BUCKETS)}")
    if config.deploy_at is not None and not 0.0 < _number(config, "deploy_at") < 1.0:
        _fail("deploy_at", f"must be in (0, 1) (a fraction of duration_s), got {config.deploy_at!r}")
    if not 0.0 <= _number(config, "night_dip") <= 0.5:
        _fail("night_dip", f"must be in [0, 0.5], got {config.night_dip!r}")
    if not 0.0 <= _number(config, "dip_hour") < 24.0:
        _fail("dip_hour", f"must be in [0, 24), got {config.dip_hour!r}")
    if not 0.0 <= _number(config, "invalid_rate") <= 0.5:
        _fail("invalid_rate", f"must be in [0, 0.5], got {config.invalid_rate!r}")
    for name in ("control_ranker", "canary_ranker", "id_prefix"):
        value = getattr(config, name)
        if not isinstance(value, str) or not value.strip() or len(value) > 64:
            _fail(name, f"expected a non-empty string of at most 64 characters, got {value!r}")
    if config.control_ranker == config.canary_ranker:
        _fail("canary_ranker", f"must differ from control_ranker ({config.control_ranker!r})")
    _check_shadow(config)


def _check_shadow(config: SimConfig) -> None:
    specs = config.shadow
    if not isinstance(specs, tuple) or not all(isinstance(s, ShadowSpec) for s in specs):
        _fail("shadow", f"expected a tuple of ShadowSpec, got {specs!r}")
    if len(specs) > MAX_SHADOW:
        _fail("shadow", f"{len(specs)} shadow candidates, more than the event limit of {MAX_SHADOW}")
    seen: set[str] = set()
    for spec in specs:
        name = spec.ranker
        if not isinstance(name, str) or not name.strip() or len(name) > 64:
            _fail("shadow", f"a ranker must be a non-empty string of at most 64 characters, got {name!r}")
        if name in (config.control_ranker, config.canary_ranker):
            _fail("shadow", f"{name!r} is a served ranker (control_ranker or canary_ranker)")
        if name in seen:
            _fail("shadow", f"{name!r} is named twice")
        seen.add(name)
        for field in ("drop", "agreement", "share"):
            value = getattr(spec, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                _fail("shadow", f"{name}: {field} must be a finite number, got {value!r}")
        if spec.kind not in REGRESSION_KINDS:
            _fail("shadow", f"{name}: kind {spec.kind!r} is not one of {', '.join(REGRESSION_KINDS)}")
        if spec.kind == "irrelevant" and not 0.0 <= spec.drop <= 1.0:
            _fail("shadow", f"{name}: drop must be in [0, 1] (a share), got {spec.drop!r}")
        if spec.kind == "flip" and not 0.0 <= spec.drop < 1.0:
            _fail("shadow", f"{name}: drop must be in [0, 1), got {spec.drop!r}")
        if spec.bucket not in REGRESSION_BUCKETS:
            _fail("shadow", f"{name}: bucket {spec.bucket!r} is not one of {', '.join(REGRESSION_BUCKETS)}")
        if not 0.0 <= spec.agreement < 1.0:
            _fail("shadow", f"{name}: agreement must be in [0, 1), got {spec.agreement!r}")
        if not 0.0 <= spec.share <= 1.0:
            _fail("shadow", f"{name}: share must be in [0, 1], got {spec.share!r}")


def _check_mix(name: str, mix: object) -> None:
    if not isinstance(mix, tuple) or len(mix) != 4:
        _fail(name, f"expected 4 probabilities (levels 0..3), got {mix!r}")
    assert isinstance(mix, tuple)
    for p in mix:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            _fail(name, f"expected non-negative probabilities, got {mix!r}")
    if not math.isclose(sum(mix), 1.0, abs_tol=1e-9):
        _fail(name, f"probabilities must sum to 1, got {sum(mix):g}")
