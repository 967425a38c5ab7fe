"""A bad-input corpus: thousands of malformed events of every kind, in roughly equal numbers, for a stream.

Every sample starts from a valid session of a simulated stream (its impression, an annotation of it, a
deploy of its ranker) and is one of

* a generated kind (:data:`~monitor.sim.invalid.KINDS`, :data:`~monitor.sim.invalid.EXTRA_KINDS`,
  :data:`~monitor.sim.invalid.MISROUTED`): rejected, with the reason code of
  :data:`~monitor.sim.invalid.CODES` and an ``expected`` substring of the ``field: reason`` message;
* a fuzzed value (:data:`FUZZ_KINDS`): a valid event truncated at a random byte, a valid event with one to
  four bytes replaced (by printable ASCII or by any other byte, half and half), or random bytes. No
  expectation is written down for these beyond "rejected with a reason code, or accepted as a valid
  event, never a crash": :func:`classify` runs the validator, and a value that still decodes (a flipped
  character of a document id, say) is kept as an *accepted* sample, to be counted like any valid event;
* a label for a document or a session that was never shown (:data:`ACCEPTED_KINDS`): valid by the schema
  and accepted (docs/events.md says why it cannot be refused), so counted like any valid event.

Each rejecting kind gives ``ceil(malformed / number of kinds)`` rejected samples (fuzzed kinds are drawn
until they have that many rejected ones), each accepted kind that many accepted ones. An accepted fuzzed
value is re-keyed as docs/events.md keys its event (the session id, the query, the ranker), and kept
only if it is not an impression timed outside the stream's span: one flipped digit can move an event
time years ahead, and that impression would move its partition's watermark past every window.

Deterministic: the same events and seed give the same samples, byte for byte.

>>> from monitor.sim import SimConfig, simulate
>>> stream = simulate(SimConfig(n_sessions=20, seed=3)).events
>>> samples = build_corpus(stream, malformed=500, seed=1)
>>> sum(s.rejected for s in samples) >= 500
True
>>> all(classify(s.topic, s.value) == s.code for s in samples)
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.core.decoding import decode_event
from monitor.core.events import (
    DEFAULT_LIMITS,
    Deploy,
    Event,
    EventError,
    Impression,
    Limits,
    expect_topic,
)
from monitor.core.grades import FOUR_LEVEL_SCALE, Scale
from monitor.sim.annotations import ZH_NAMES
from monitor.sim.invalid import EXTRA_KINDS, KINDS, MISROUTED, Bases, base_key, malformed
from monitor.sim.records import TOPICS, SimEvent, encode

FUZZ_KINDS = ("fuzz_truncated", "fuzz_flipped", "fuzz_binary")
ACCEPTED_KINDS = ("unshown_document", "unknown_session")
GENERATED_KINDS = (*KINDS, *EXTRA_KINDS, *MISROUTED)
REJECTING_KINDS = (*GENERATED_KINDS, *FUZZ_KINDS)
_BASE_TOPICS = {"impression": "impressions", "single": "annotations", "batch": "annotations",
                "deploy": "deploys"}


@dataclass(frozen=True, slots=True)
class Sample:
    """One corpus record. ``code`` is the reason code of its rejection, None for a value that is a valid
    event; ``expected`` is a substring of the ``field: reason`` message (generated kinds only)."""

    kind: str
    topic: str
    key: bytes
    value: bytes
    code: str | None
    expected: str | None = None

    @property
    def rejected(self) -> bool:
        return self.code is not None

    def record(self, ts: float = 0.0) -> SimEvent:
        """As a simulator record (``expected_error``: the expected message, else the code, else None)."""
        return SimEvent(self.topic, self.key, self.value, ts, self.expected or self.code)


def classify(topic: str, value: bytes, scale: Scale = FOUR_LEVEL_SCALE,
             limits: Limits = DEFAULT_LIMITS) -> str | None:
    """The reason code the validator gives ``value`` on ``topic``, or None if it is a valid event there.

    Only :class:`EventError` is caught: any other exception is a validator bug and propagates."""
    try:
        expect_topic(decode_event(value, scale, limits), topic)
    except EventError as error:
        return error.code
    return None


def event_key(event: Event) -> bytes:
    """The key docs/events.md gives an event: session id, query (query-level annotation) or ranker."""
    if isinstance(event, Deploy):
        return event.ranker.encode("utf-8")
    if isinstance(event, Impression) or event.session_id is not None:
        return (event.session_id or "").encode("utf-8")
    return (event.query or "").encode("utf-8")


def bases_of(impression: dict[str, Any], rng: np.random.Generator) -> Bases:
    """Valid events of one session to break: its impression, a single and a batched annotation of its
    first documents (random grades), and a deploy of its ranker at its time."""
    docs = [r["doc_id"] for r in impression["results"]]
    head = {"type": "annotation", "schema": 1, "session_id": impression["session_id"]}
    grades = rng.integers(0, len(ZH_NAMES), size=3).tolist()
    return Bases(
        impression=impression,
        single={**head, "doc_id": docs[0], "grade": ZH_NAMES[grades[0]], "ts": impression["ts"]},
        batch={**head, "grades": [{"doc_id": d, "grade": ZH_NAMES[g]} for d, g in zip(docs[:3], grades,
                                                                                      strict=False)],
               "ts": impression["ts"]},
        deploy={"type": "deploy", "schema": 1, "kind": "deploy", "ranker": impression["ranker"],
                "ts": impression["ts"]},
    )


class _Builder:
    def __init__(self, events: Sequence[SimEvent], seed: int, scale: Scale, limits: Limits) -> None:
        self.impressions = [json.loads(e.value) for e in events if e.topic == "impressions" and e.valid]
        if not self.impressions:
            raise ValueError("the stream has no valid impression to start from")
        times = [float(i["ts"]) for i in self.impressions]
        self.span = (min(times), max(times))
        self.rng = np.random.default_rng(seed)
        self.scale, self.limits = scale, limits

    def bases(self) -> Bases:
        return bases_of(self.impressions[int(self.rng.integers(len(self.impressions)))], self.rng)

    def generated(self, kind: str) -> Sample:
        bad = malformed(kind, self.bases(), self.rng)
        return Sample(kind, bad.topic, bad.key, bad.value, bad.code, bad.expected)

    def fuzzed(self, kind: str) -> Sample | None:
        """One fuzzed value, classified; None for an accepted one that would move a watermark."""
        rng, bases = self.rng, self.bases()
        base_name = ("impression", "single", "batch", "deploy")[int(rng.integers(4))]
        base = getattr(bases, base_name)
        topic, key, raw = _BASE_TOPICS[base_name], base_key(base_name, base), encode(base)
        if kind == "fuzz_truncated":
            value = raw[: int(rng.integers(0, len(raw)))]
        elif kind == "fuzz_flipped":
            flipped = bytearray(raw)
            for _ in range(int(rng.integers(1, 5))):
                at = int(rng.integers(len(flipped)))
                if rng.random() < 0.5:  # printable ASCII: the JSON often survives, its meaning does not
                    flipped[at] = int(rng.integers(0x20, 0x7F))
                else:  # any byte but the one there
                    flipped[at] = (flipped[at] + int(rng.integers(1, 256))) % 256
            value = bytes(flipped)
        else:
            topic = TOPICS[int(rng.integers(len(TOPICS)))]
            value = rng.bytes(int(rng.integers(1, 2049)))
        code = classify(topic, value, self.scale, self.limits)
        if code is not None:
            return Sample(kind, topic, key, value, code)
        event = decode_event(value, self.scale, self.limits)
        if isinstance(event, Impression) and not self.span[0] <= event.ts <= self.span[1]:
            return None
        return Sample(kind, topic, event_key(event), value, None)

    def accepted(self, kind: str, n: int) -> Sample:
        impression = self.impressions[int(self.rng.integers(len(self.impressions)))]
        docs = [r["doc_id"] for r in impression["results"]]
        grade = ZH_NAMES[int(self.rng.integers(len(ZH_NAMES)))]
        session_id = impression["session_id"]
        if kind == "unshown_document":  # a real session, a document it never showed
            doc = f"{docs[0]}-never-shown-{n}"
        else:  # a session that was never shown at all
            session_id, doc = f"{session_id}-never-shown-{n}", docs[0]
        value = encode({"type": "annotation", "schema": 1, "session_id": session_id, "doc_id": doc,
                        "grade": grade, "ts": impression["ts"]})
        return Sample(kind, "annotations", session_id.encode("utf-8"), value, None)


def build_corpus(events: Sequence[SimEvent], malformed: int = 10_000, seed: int = 0,
                 scale: Scale = FOUR_LEVEL_SCALE, limits: Limits = DEFAULT_LIMITS) -> list[Sample]:
    """At least ``malformed`` rejected samples, every kind of :data:`REJECTING_KINDS` equally, plus the
    accepted ones (fuzzed values that still decode, :data:`ACCEPTED_KINDS`), built from the valid
    impressions of ``events``; grouped by kind (:func:`interleave` mixes them into a stream)."""
    if malformed < 1:
        raise ValueError(f"malformed must be ≥ 1, got {malformed}")
    builder = _Builder(events, seed, scale, limits)
    per_kind = math.ceil(malformed / len(REJECTING_KINDS))
    out: list[Sample] = []
    for kind in GENERATED_KINDS:
        out.extend(builder.generated(kind) for _ in range(per_kind))
    for kind in FUZZ_KINDS:
        rejected = 0
        while rejected < per_kind:
            sample = builder.fuzzed(kind)
            if sample is not None:
                out.append(sample)
                rejected += sample.rejected
    for kind in ACCEPTED_KINDS:
        out.extend(builder.accepted(kind, n) for n in range(per_kind))
    return out


def interleave(events: Sequence[SimEvent], samples: Sequence[Sample], seed: int = 0) -> list[SimEvent]:
    """``samples`` inserted at random places of ``events`` (whose order is kept), as records whose
    ``ts`` is that of the event before them (the first event's at the start)."""
    rng = np.random.default_rng(seed)
    places = rng.integers(0, len(events) + 1, size=len(samples))
    order = np.argsort(places, kind="stable")
    out: list[SimEvent] = []
    cursor = 0
    for i in order.tolist():
        place = int(places[i])
        out.extend(events[cursor:place])
        cursor = max(cursor, place)
        ts = out[-1].ts if out else (events[0].ts if events else 0.0)
        out.append(samples[i].record(ts))
    out.extend(events[cursor:])
    return out
