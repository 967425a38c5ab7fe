"""``RaterTally``: the rater-quality counts of many units, per bucket and per annotator, and the thresholds.

What it holds, all integer counts that merge by addition (per worker, per batch, per window):

* ``buckets``: a :class:`Coincidence` per query-frequency bucket, from the overlapped units' measured
  grades (``policy.measured``): Krippendorff's alpha per bucket, and over all buckets (:meth:`overall`);
* ``peers``: per annotator, a :class:`GradeMatrix` of (their grade, the other rater's grade) for every
  other rater of the units they graded: their weighted kappa against their peers;
* ``gold``: per annotator, a :class:`GradeMatrix` of (known grade, their grade) on gold tasks: exact and
  within-one-step gold accuracy.

:func:`assess` compares each value with :class:`RaterThresholds` and says ``low``, ``ok`` or, with too
few counts, ``inconclusive`` (no data is not a pass). Annotator keys are whatever the caller uses (ids);
``merged_by`` sums them under bounded labels (``identity.cap_annotators``) for export.

>>> t = RaterTally(4)
>>> t.add_unit("head", {"u1": 3, "u2": 3}); t.add_unit("head", {"u1": 0, "u2": 1}); t.add_gold("u1", 2, 2)
>>> t.overall().units, t.peers["u1"].total, t.gold["u1"].exact_share()
(2, 2, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from monitor.core.agreement.alpha import Coincidence
from monitor.core.agreement.matrix import GradeMatrix, check_level, check_levels
from monitor.core.errors import MonitorError


@dataclass
class RaterTally:
    """Per bucket: coincidences; per annotator: peer and gold matrices (module docstring)."""

    levels: int
    buckets: dict[str, Coincidence] = field(default_factory=dict)
    peers: dict[str, GradeMatrix] = field(default_factory=dict)
    gold: dict[str, GradeMatrix] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.levels = check_levels(self.levels)

    def _unit(self, bucket: str, grades: Mapping[str, int], sign: int) -> None:
        if not bucket:
            raise MonitorError("a unit's bucket must not be empty")
        levels = {rater: check_level(level, self.levels, f"grade of {rater!r}")
                  for rater, level in grades.items()}
        if len(levels) < 2:
            return  # one grade: not pairable, nothing to agree on
        coincidence = self.buckets.setdefault(bucket, Coincidence(self.levels))
        if sign > 0:
            coincidence.add_unit(levels.values())
        else:
            coincidence.take_back_unit(levels.values())
        for rater, own in levels.items():
            matrix = self.peers.setdefault(rater, GradeMatrix.empty(self.levels))
            for other, theirs in levels.items():
                if other != rater:
                    matrix.add(own, theirs, sign)

    def add_unit(self, bucket: str, grades: Mapping[str, int]) -> None:
        """Count one overlapped unit: annotator → level (one grade per annotator; a unit with fewer
        than two annotators adds nothing)."""
        self._unit(bucket, grades, 1)

    def take_back_unit(self, bucket: str, grades: Mapping[str, int]) -> None:
        """Take back a unit counted before with these grades (e.g. before counting it again edited)."""
        self._unit(bucket, grades, -1)

    def add_gold(self, annotator: str, known: int, given: int) -> None:
        """Count one answer to a gold task whose known grade is ``known``."""
        self.gold.setdefault(annotator, GradeMatrix.empty(self.levels)).add(known, given)

    def take_back_gold(self, annotator: str, known: int, given: int) -> None:
        self.gold.setdefault(annotator, GradeMatrix.empty(self.levels)).add(known, given, -1)

    def _combine(self, other: RaterTally, sign: int) -> None:
        if other.levels != self.levels:
            raise MonitorError(f"cannot combine tallies of {self.levels} and {other.levels} levels")
        for bucket, coincidence in other.buckets.items():
            mine = self.buckets.setdefault(bucket, Coincidence(self.levels))
            if sign > 0:
                mine.merge(coincidence)
            else:
                mine.take_back(coincidence)
        for own, theirs in ((self.peers, other.peers), (self.gold, other.gold)):
            for rater, matrix in theirs.items():
                held = own.setdefault(rater, GradeMatrix.empty(self.levels))
                if sign > 0:
                    held.merge(matrix)
                else:
                    held.take_back(matrix)

    def merge(self, other: RaterTally) -> None:
        self._combine(other, 1)

    def take_back(self, other: RaterTally) -> None:
        """Take back ``other``, merged in before: the inverse of :meth:`merge`."""
        self._combine(other, -1)

    def __add__(self, other: RaterTally) -> RaterTally:
        out = RaterTally(self.levels)
        out.merge(self)
        out.merge(other)
        return out

    def __eq__(self, other: object) -> bool:
        """Equal counts (entries whose counts are all zero count as absent)."""
        if not isinstance(other, RaterTally) or other.levels != self.levels:
            return False
        empty_c, empty_m = Coincidence(self.levels), GradeMatrix.empty(self.levels)
        return (all(self.buckets.get(b, empty_c) == other.buckets.get(b, empty_c)
                    for b in self.buckets.keys() | other.buckets.keys())
                and all(mine.get(r, empty_m) == theirs.get(r, empty_m)
                        for mine, theirs in ((self.peers, other.peers), (self.gold, other.gold))
                        for r in mine.keys() | theirs.keys()))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def overall(self) -> Coincidence:
        """Every bucket's coincidences together."""
        out = Coincidence(self.levels)
        for coincidence in self.buckets.values():
            out.merge(coincidence)
        return out

    def fields(self) -> dict[str, int]:
        """Every non-zero count as one field of a Redis hash that HINCRBY sums: ``b|<bucket>|m|c|k``
        (coincidences), ``p|<annotator>|i|j`` (peers), ``g|<annotator>|i|j`` (gold). Buckets and
        annotators are the last ``|``-free part before the counts' own fields, so they may not hold ``|``.

        >>> t = RaterTally(4); t.add_unit("head", {"7": 3, "9": 2}); t.add_gold("7", 1, 1)
        >>> sorted(t.fields())
        ['b|head|2|2|3', 'b|head|2|3|2', 'g|7|1|1', 'p|7|3|2', 'p|9|2|3']
        >>> RaterTally.from_fields(4, t.fields()) == t
        True
        """
        out: dict[str, int] = {}
        for bucket, coincidence in self.buckets.items():
            _no_bar(bucket, "bucket")
            out.update({f"b|{bucket}|{name}": n for name, n in coincidence.fields().items()})
        for tag, own in (("p", self.peers), ("g", self.gold)):
            for rater, matrix in own.items():
                _no_bar(rater, "annotator")
                out.update({f"{tag}|{rater}|{name}": n for name, n in matrix.fields().items()})
        return out

    @classmethod
    def from_fields(cls, levels: int, fields: Mapping[str, int | str | bytes]) -> RaterTally:
        """The inverse of :meth:`fields` (counts as Redis returns them, bytes or text, are read as
        integers); :class:`MonitorError` naming a field it cannot read."""
        coincidences: dict[str, dict[str, int]] = {}
        matrices: dict[tuple[str, str], dict[str, int]] = {}
        for name, raw in fields.items():
            text = name.decode() if isinstance(name, bytes) else str(name)
            try:
                count = int(raw)
            except (TypeError, ValueError):
                raise MonitorError(f"rater field {text!r}: count {raw!r} is not an integer") from None
            tag, _, rest = text.partition("|")
            if tag == "b" and rest.count("|") >= 3:
                bucket, m, c, k = rest.rsplit("|", 3)
                coincidences.setdefault(bucket, {})[f"{m}|{c}|{k}"] = count
            elif tag in ("p", "g") and rest.count("|") >= 2:
                rater, i, j = rest.rsplit("|", 2)
                matrices.setdefault((tag, rater), {})[f"{i}|{j}"] = count
            else:
                raise MonitorError(f"rater field {text!r} is not b|bucket|m|c|k, p|who|i|j or g|who|i|j")
        out = cls(levels)
        for bucket, counts in coincidences.items():
            out.buckets[bucket] = Coincidence.from_fields(levels, counts)
        for (tag, rater), counts in matrices.items():
            (out.peers if tag == "p" else out.gold)[rater] = GradeMatrix.from_fields(levels, counts)
        return out

    def merged_by(self, labels: Mapping[str, str]) -> RaterTally:
        """The same counts with each annotator under ``labels[annotator]`` (several annotators under one
        label, e.g. ``other``, summed); :class:`MonitorError` for an annotator without a label."""
        buckets = {b: Coincidence(self.levels, c.by_size) for b, c in self.buckets.items()}
        out = RaterTally(self.levels, buckets)
        for own, theirs in ((out.peers, self.peers), (out.gold, self.gold)):
            for rater, matrix in theirs.items():
                if rater not in labels:
                    raise MonitorError(f"annotator {rater!r} has no label")
                own.setdefault(labels[rater], GradeMatrix.empty(self.levels)).merge(matrix)
        return out


def _no_bar(name: str, what: str) -> None:
    if not name or "|" in name:
        raise MonitorError(f"a {what} in a rater field must be non-empty and hold no '|', got {name!r}")


Status = Literal["low", "ok", "inconclusive"]


@dataclass(frozen=True)
class RaterThresholds:
    """The floors below which agreement is low (docs/annotate.md, "Rater quality", for how they were
    chosen), and the least counts that make a value conclusive.

    >>> RaterThresholds(alpha=1.5)
    Traceback (most recent call last):
    ...
    monitor.core.errors.MonitorError: alpha: must be in [-1, 1], got 1.5
    """

    alpha: float = 0.667
    annotator_kappa: float = 0.5
    gold_exact: float = 0.5
    min_units: int = 50
    min_pairs: int = 50
    min_gold: int = 20

    def __post_init__(self) -> None:
        for name in ("alpha", "annotator_kappa"):
            value = getattr(self, name)
            if not -1.0 <= value <= 1.0:
                raise MonitorError(f"{name}: must be in [-1, 1], got {value}")
        if not 0.0 <= self.gold_exact <= 1.0:
            raise MonitorError(f"gold_exact: must be in [0, 1], got {self.gold_exact}")
        for name in ("min_units", "min_pairs", "min_gold"):
            if getattr(self, name) < 1:
                raise MonitorError(f"{name}: must be ≥ 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Finding:
    """One value against its threshold: ``scope`` ``bucket`` (key: the bucket, or ``all``) or
    ``annotator``; ``measure`` ``alpha`` (ordinal), ``kappa`` (quadratic, against peers) or ``gold_exact``;
    ``count``: the units, pairs or gold answers behind it."""

    scope: str
    key: str
    measure: str
    value: float | None
    threshold: float
    count: int
    status: Status


def _status(value: float | None, threshold: float, count: int, least: int) -> Status:
    if value is None or count < least:
        return "inconclusive"
    return "low" if value < threshold else "ok"


def assess(tally: RaterTally, thresholds: RaterThresholds = RaterThresholds()) -> list[Finding]:
    """Every bucket's and the overall alpha, each annotator's kappa and gold accuracy, against
    ``thresholds``; in that order, buckets and annotators sorted."""
    out: list[Finding] = []
    scopes = [*sorted(tally.buckets.items()), ("all", tally.overall())]
    for key, coincidence in scopes:
        value, units = coincidence.alpha("ordinal"), coincidence.units
        out.append(Finding("bucket", key, "alpha", value, thresholds.alpha, units,
                           _status(value, thresholds.alpha, units, thresholds.min_units)))
    for rater in sorted(tally.peers.keys() | tally.gold.keys()):
        peers = tally.peers.get(rater, GradeMatrix.empty(tally.levels))
        kappa = peers.kappa("quadratic")
        out.append(Finding("annotator", rater, "kappa", kappa, thresholds.annotator_kappa, peers.total,
                           _status(kappa, thresholds.annotator_kappa, peers.total, thresholds.min_pairs)))
        gold = tally.gold.get(rater, GradeMatrix.empty(tally.levels))
        exact = gold.exact_share()
        out.append(Finding("annotator", rater, "gold_exact", exact, thresholds.gold_exact, gold.total,
                           _status(exact, thresholds.gold_exact, gold.total, thresholds.min_gold)))
    return out
