"""A task's grades as the rater-quality policy reads them, as pure functions (no I/O, no clock).

docs/annotate.md, "Rater quality", says what the policy is; :mod:`monitor.core.agreement.policy` holds it.
This module applies it to a Label Studio task's annotations, for the bridge and for an offline run alike:

* :func:`ratings`: one grade per annotator, their latest (an annotator who edits or grades again corrects
  themselves), in the order the annotators first graded the task;
* :func:`choice`: the grade that counts, ``policy.chosen_grade`` of the annotators' grades (the median,
  the lower middle of two), as the :class:`GradeGiven` the bridge produces;
* :func:`wanted_overlap`: how many annotators the task needs: 2 for a pair in the overlap share, 3 once its
  first two grades differ by more than one step (``policy.needs_third``), else 1;
* :func:`contribution`: what the task adds to the rater-quality counts (a :class:`RaterTally`): an
  overlapped pair's first two grades (``policy.measured``) as a unit of its bucket, a gold task's grades
  against its known grade.

A pair task whose annotations are all by one annotator is graded exactly as before the policy existed: the
annotation changed last counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from monitor.annotate.tasks import GRADES, GradeGiven, annotation_grade
from monitor.core.agreement.policy import chosen_grade, in_share, measured, needs_third
from monitor.core.agreement.tally import RaterTally

#: grade name → level (无 0 … 高 3), the order the policy's median and gaps are taken in
LEVEL_OF: dict[str, int] = {name: len(GRADES) - 1 - index for index, (name, _) in enumerate(GRADES)}
NAME_OF: dict[int, str] = {level: name for name, level in LEVEL_OF.items()}
LEVELS = len(GRADES)
#: the salt of ``policy.in_share`` that picks the overlapped pairs
OVERLAP_SALT = "overlap"
#: the bucket of a pair whose request named none, or one that is not a plain short name (a label value
#: must come from a bounded set: the worker's buckets are ``head``, ``torso``, ``tail``)
NO_BUCKET = "unknown"
_BUCKET = re.compile(r"[a-z0-9_-]{1,32}")


def bucket_of(value: Any) -> str:
    """A task's bucket as a label value: the request's ``query_bucket`` if it is a plain short name.

    >>> bucket_of("head"), bucket_of(None), bucket_of("蓝牙 耳机")
    ('head', 'unknown', 'unknown')
    """
    return value if isinstance(value, str) and _BUCKET.fullmatch(value) else NO_BUCKET


def rater_of(given: GradeGiven) -> str:
    """Who gave a grade: the Label Studio user id, or (an annotation without one) the annotation itself."""
    return str(given.annotator) if given.annotator is not None else f"a{given.annotation_id}"


def ratings(annotations: Sequence[Mapping[str, Any]]) -> list[GradeGiven]:
    """One grade per annotator (their annotation changed last, then the highest id), ordered by each
    annotator's first annotation id: who graded first, second, third.

    >>> a = lambda i, g, t, who: {"id": i, "completed_by": who, "updated_at": t, "result": [
    ...     {"from_name": "grade", "value": {"choices": [g]}}]}
    >>> [(g.grade, g.annotator) for g in ratings([a(5, "低", "2026-01-01T00:00:09Z", 2),
    ...     a(3, "高", "2026-01-01T00:00:01Z", 1), a(4, "中", "2026-01-01T00:00:05Z", 1)])]
    [('中', 1), ('低', 2)]
    """
    latest: dict[str, GradeGiven] = {}
    first: dict[str, int] = {}
    for annotation in annotations:
        given = annotation_grade(annotation)
        if given is None:
            continue
        who = rater_of(given)
        first[who] = min(first.get(who, given.annotation_id), given.annotation_id)
        held = latest.get(who)
        if held is None or (given.ts, given.annotation_id) > (held.ts, held.annotation_id):
            latest[who] = given
    return [latest[who] for who in sorted(latest, key=lambda w: first[w])]


def choice(grades: Sequence[GradeGiven]) -> GradeGiven | None:
    """The grade that counts (``policy.chosen_grade`` of the levels), as given by the latest-changed
    annotation with that level, at the latest change of any of them (so that any change is a new
    identity, and the stream's latest-``ts`` rule takes it); None without grades.

    >>> g = lambda i, name, ts, who: GradeGiven(i, name, ts, who)
    >>> choice([g(1, "高", 10.0, 1), g(2, "低", 20.0, 2)])
    GradeGiven(annotation_id=2, grade='低', ts=20.0, annotator=2)
    >>> choice([g(1, "高", 10.0, 1), g(2, "无", 20.0, 2), g(3, "中", 15.0, 3)])
    GradeGiven(annotation_id=3, grade='中', ts=20.0, annotator=3)
    """
    if not grades:
        return None
    level = chosen_grade([LEVEL_OF[g.grade] for g in grades])
    giving = max((g for g in grades if LEVEL_OF[g.grade] == level), key=lambda g: (g.ts, g.annotation_id))
    return GradeGiven(giving.annotation_id, giving.grade, max(g.ts for g in grades), giving.annotator)


def in_overlap(pair: str, share: float) -> bool:
    """Whether the pair ``pair`` (its key) is one of the ``share`` of pairs sent to two annotators."""
    return in_share(pair, share, OVERLAP_SALT)


def wanted_overlap(overlapped: bool, grades: Sequence[GradeGiven], max_gap: int = 1) -> int:
    """How many annotators the task needs (module docstring); never fewer than have graded it already
    would make Label Studio call it done, so a reopened task stays open only for the third.

    >>> g = lambda i, name: GradeGiven(i, name, float(i), i)
    >>> wanted_overlap(False, []), wanted_overlap(True, [g(1, "高")])
    (1, 2)
    >>> wanted_overlap(True, [g(1, "高"), g(2, "低")]), wanted_overlap(True, [g(1, "高"), g(2, "中")])
    (3, 2)
    """
    first_two = measured([LEVEL_OF[g.grade] for g in grades])
    if len(first_two) == 2 and needs_third(first_two, max_gap):
        return 3
    return 2 if overlapped else 1


def contribution(grades: Sequence[GradeGiven], *, bucket: str | None, overlapped: bool,
                 known: int | None) -> RaterTally:
    """What the task adds to the rater-quality counts: with ``known`` (a gold task's known level) each
    annotator's grade against it; else, for an overlapped pair, its first two annotators' grades as one
    unit of ``bucket``. A pair outside the overlap adds nothing, even when graded twice by hand: the
    overlap is the random sample agreement is measured on.

    >>> g = lambda i, name, who: GradeGiven(i, name, float(i), who)
    >>> t = contribution([g(1, "高", 7), g(2, "中", 8), g(3, "无", 9)], bucket="head", overlapped=True,
    ...                  known=None)
    >>> t.overall().units, sorted(t.peers)
    (1, ['7', '8'])
    >>> contribution([g(1, "中", 7)], bucket=None, overlapped=False, known=2).gold["7"].exact_share()
    1.0
    """
    tally = RaterTally(LEVELS)
    if known is not None:
        for given in grades:
            tally.add_gold(rater_of(given), known, LEVEL_OF[given.grade])
        return tally
    if overlapped and len(grades) >= 2:
        first_two = grades[:2]
        levels = measured([LEVEL_OF[g.grade] for g in first_two])
        tally.add_unit(bucket_of(bucket), {rater_of(g): level for g, level in zip(first_two, levels,
                                                                                   strict=True)})
    return tally
