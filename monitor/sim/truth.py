"""Ground truth of a run: what every session showed and the final grades, for offline recomputation."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ShadowTruth:
    """A shadow list as generated (never shown): its candidate ranker, documents, scores and latent levels
    in list order; ``degraded``: the candidate's simulated regression chose it."""

    ranker: str
    doc_ids: tuple[str, ...]
    scores: tuple[float, ...]
    levels: tuple[int, ...]
    degraded: bool = False


@dataclass(frozen=True, slots=True)
class SessionTruth:
    """One impression as generated: ``bucket`` is the true bucket (the event may omit ``query_bucket``).

    ``doc_ids``, ``scores`` and ``levels`` (latent grades 0..3) are in the order shown (position 1 first).
    ``variant`` is ``control`` or ``canary``, or ``""`` for a plain impression (a deploy run: no ``variant``
    field). ``degraded`` is True when the canary (or newly deployed) ranker served its broken list (the
    simulated regression): the flipped ranker's list, or with ``SimConfig.regression_kind`` "irrelevant"
    only the query's irrelevant documents (its lowest-graded ones for a pool without a grade-0 document).
    ``shadow``: the impression's shadow lists (``SimConfig.shadow``), in the event's order.
    """

    session_id: str
    query: str
    bucket: str
    ranker: str
    variant: str
    ts: float
    doc_ids: tuple[str, ...]
    scores: tuple[float, ...]
    levels: tuple[int, ...]
    bucket_hint: bool
    degraded: bool = False
    shadow: tuple[ShadowTruth, ...] = ()


@dataclass
class GroundTruth:
    """Filled while events are generated.

    ``session_grades``: session id → {doc id → level} for the labelled sessions, after corrections (the
    documents the annotators covered: of the shown top k and, with shadow lists, of their top k too).
    ``query_grades``: query → {doc id → level} for query-level
    judgments (the query's whole pool). ``pools``: query → {doc id → level} for every query searched.
    """

    sessions: dict[str, SessionTruth] = field(default_factory=dict)
    session_grades: dict[str, dict[str, int]] = field(default_factory=dict)
    query_grades: dict[str, dict[str, int]] = field(default_factory=dict)
    pools: dict[str, dict[str, int]] = field(default_factory=dict)
