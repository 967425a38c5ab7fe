"""A session waiting in (or done with) the join, serialisable to one JSON string for the state store."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Literal

import msgspec

Status = Literal["pending", "scored", "expired"]


@lru_cache(maxsize=16384)
def query_key(query: str) -> str:
    """A stable, fixed-length key for a query's text (the text itself is never a key or a label);
    remembered for the 16,384 most recent queries (head queries repeat, and a batch asks several times)."""
    return hashlib.blake2b(query.encode("utf-8"), digest_size=12, person=b"query-key").hexdigest()


@dataclass
class SessionRecord:
    """One sampled session: what was shown (top k), its labels (doc → grade level) and its status.

    ``contribution`` is what the session added to the aggregates (its slice is fixed by ``ts``), kept so
    a correction or a late label can take it back exactly before adding the new one.

    Shadow lists (issue 28, :mod:`monitor.core.stream.shadow`): ``shadow_docs``/``shadow_scores``, the top
    k of each declared candidate ranker's list for the same request (never shown: the served ``docs`` alone
    decide coverage and expiry; a session waits for the grades of the union of its lists to be scored
    at once, :meth:`complete`), and ``shadow_contributions``, group → the paired contribution
    each added, taken back like ``contribution``. ``requested`` is over :meth:`union` (the served top k
    first, so a record without shadow lists reads as before). Records stored before these fields read
    them as empty, and a record without shadow lists is stored exactly as before.
    """

    session_id: str
    query_key: str
    bucket: str
    ranker: str
    variant: str
    ts: float
    k: int
    docs: list[str]
    scores: list[float] | None
    deadline: float
    labels: dict[str, int] = field(default_factory=dict)        # from session annotations
    status: Status = "pending"
    contribution: dict[str, float] | None = None
    scored_at: float | None = None
    query_labels: dict[str, int] = field(default_factory=dict)  # from the query's judgments
    requested: int = 0  # bit i set: union()[i] was asked of annotators (ungraded when it was sampled)
    shared: dict[str, int] = field(default_factory=dict)  # other sessions' grades of its query's documents
    # the ts of the grade held, per document, for grades that came with one (the latest ts wins:
    # monitor.core.stream.held_grades.merge_grades); records stored before these fields read as empty
    label_ts: dict[str, float] = field(default_factory=dict)
    query_label_ts: dict[str, float] = field(default_factory=dict)
    shadow_docs: dict[str, list[str]] = field(default_factory=dict)  # candidate ranker -> its top k
    shadow_scores: dict[str, list[float] | None] = field(default_factory=dict)  # ranker -> their scores
    shadow_contributions: dict[str, dict[str, float]] = field(default_factory=dict)  # group -> paired stats

    def effective(self) -> dict[str, int]:
        """The grades the session is scored with: its own label wins over its query's judgment, which
        wins over another session's grade (shared through the query), whatever order they arrived in."""
        if not self.query_labels and not self.shared:
            return self.labels
        return {**self.shared, **self.query_labels, **self.labels}

    @property
    def group(self) -> str:
        return group_key(self.bucket, self.ranker, self.variant)

    def coverage(self) -> float:
        labels = self.effective()
        return sum(1 for d in self.docs if d in labels) / len(self.docs) if self.docs else 0.0

    def complete(self) -> bool:
        """Whether every document the session waits for has a grade: its served top k and, with shadow
        lists, theirs too (:meth:`union`): a session with shadow lists is scored, served and shadow lists
        together, once the union is graded or at its close, so both lists of a pair are scored from the
        same grades (issue 42)."""
        labels = self.effective()
        return all(d in labels for d in self.union())

    def missing(self) -> list[str]:
        """The top-k documents without a grade yet (neither the session's own nor its query's)."""
        labels = self.effective()
        return [d for d in self.docs if d not in labels]

    def union(self) -> list[str]:
        """The served top k, then the shadow lists' documents not in it, each once, in order of first
        appearance: the documents the session asks grades for."""
        if not self.shadow_docs:
            return self.docs
        return list(dict.fromkeys([*self.docs, *(d for docs in self.shadow_docs.values() for d in docs)]))

    def missing_union(self) -> list[str]:
        """The documents of :meth:`union` without a grade yet."""
        labels = self.effective()
        return [d for d in self.union() if d not in labels]

    def requested_docs(self) -> set[str]:
        """The documents the session's annotation request asked for."""
        mask = self.requested
        return {d for i, d in enumerate(self.union()) if mask >> i & 1} if mask else set()

    def to_json(self) -> bytes:
        """The record as compact UTF-8 JSON (msgspec: ~5x json.dumps), its fields one level deep
        (dataclasses.asdict deep-copies every list), the stamps only when there are some (a stream
        without ts stores what it stored before). msgspec writes a non-finite float as null where json
        writes Infinity; no field of a record holds one (times, validated scores, sums of those), and if
        one ever did, json writes it as before."""
        fields_ = {f: getattr(self, f) for f in _FIELDS if f not in _OPTIONAL or getattr(self, f)}
        if _finite(self.ts, self.deadline, self.scored_at, *(self.contribution or {}).values()):
            return _ENCODER.encode(fields_)
        return json.dumps(fields_, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, text: str | bytes) -> SessionRecord:
        try:
            return cls(**_DECODER.decode(text))
        except msgspec.DecodeError:  # a record json wrote with Infinity (see to_json)
            return cls(**json.loads(text))


_FIELDS = tuple(f.name for f in fields(SessionRecord))
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(dict[str, Any])


def _finite(*values: float | None) -> bool:
    return all(v is None or math.isfinite(v) for v in values)
_OPTIONAL = frozenset({"label_ts", "query_label_ts", "shadow_docs", "shadow_scores", "shadow_contributions"})


def group_key(bucket: str, ranker: str, variant: str) -> str:
    """``bucket|ranker|variant``: the aggregation group (bounded label values are chosen at export)."""
    return f"{bucket}|{ranker}|{variant}"


def split_group(key: str) -> tuple[str, str, str]:
    bucket, ranker, variant = key.split("|", 2)
    return bucket, ranker, variant
