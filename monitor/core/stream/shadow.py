"""A sampled session's shadow lists in the join (issue 28): their top k kept on the session, and the paired
contribution of each one that reaches the coverage minimum, added, re-scored and taken back with the
session's served contribution.

A shadow list (:class:`~monitor.core.events.ShadowList`, of a declared candidate ranker: the stores drop
the others before the step) is never shown; the session keeps its top k (doc ids and scores, at most
``Limits.max_shadow_lists`` lists: what the impression was validated against), and its annotation request
asks for the ungraded documents of the union of the served and shadow top k
(:meth:`~monitor.core.stream.session.SessionRecord.union`). Whenever the served list is scored (first
scoring or re-scoring, as today), each shadow list contributes :func:`sent_fields` (it was sent: the
share of the served sessions the candidate reaches, and whether they differ from the others), and each one
whose own top k reaches ``min_coverage`` with the session's grades :func:`paired_fields` of the served
list (its DCG@k, concordant and discordant pairs: the served contribution's own fields) and of the shadow list
(the same measures, :func:`~monitor.core.stream.stats.session_stats` on the shadow list with the same
grades and k) to the group :func:`shadow_group` (``bucket|candidate|shadow``), at the session's ``ts``.
The previous paired contributions (``SessionRecord.shadow_contributions``) are taken back first, with
``Delta(..., take_back=True)``, exactly as the served one. A pair needs the served list scored: a
session that expires adds none, and pairs when a late label scores it (a scored session is never expired
again, it is re-scored; an expiry would take its pairs back all the same, :func:`take_back_paired`).
So the paired sums, like the served ones, depend only on each session's impression and final grades.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from monitor.core.events import Impression
from monitor.core.judged import JudgedList
from monitor.core.stream.counters import Counter
from monitor.core.stream.session import SessionRecord, group_key, split_group
from monitor.core.stream.stats import Stats, session_stats
from monitor.core.stream.transition import Delta, Transition

SHADOW = "shadow"
"""The variant of a paired group: ``bucket|candidate ranker|shadow`` (a bounded label value)."""

Judge = Callable[[list[str], list[float] | None], JudgedList]
"""A list (doc ids, scores) joined with the session's grades."""


def shadow_group(bucket: str, ranker: str) -> str:
    """The group a candidate ranker's paired contributions add to.

    >>> shadow_group("head", "ranker-b")
    'head|ranker-b|shadow'
    """
    return group_key(bucket, ranker, SHADOW)


PARTS = ("cx", "dx", "cy", "dy")


def paired_fields(x: float, y: float, served_pairs: tuple[float, float],
                  shadow_pairs: tuple[float, float]) -> dict[str, float]:
    """One session's paired sums: ``pair_n`` = 1, the served and shadow DCG@k ``pair_x``, ``pair_y`` and
    their products, the (concordant, discordant) pairs of both lists, ``pair_cx``, ``pair_dx``,
    ``pair_cy``, ``pair_dy``, and every product of two of those: what the canary reads
    (:func:`monitor.core.canary.paired.paired_stats` checks its inputs and calls this).

    >>> f = paired_fields(2.0, 1.5, (3.0, 1.0), (2.0, 2.0))
    >>> f["pair_xy"], f["pair_cx_dy"], len(f)
    (3.0, 6.0, 20)
    """
    values = dict(zip(PARTS, (*served_pairs, *shadow_pairs), strict=True))
    out = {"pair_n": 1.0, "pair_x": x, "pair_y": y, "pair_xx": x * x, "pair_yy": y * y, "pair_xy": x * y}
    out.update({f"pair_{p}": v for p, v in values.items()})
    out.update({f"pair_{a}_{b}": values[a] * values[b] for i, a in enumerate(PARTS) for b in PARTS[i:]})
    return out


def keep_shadow(record: SessionRecord, event: Impression, k: int) -> None:
    """Keep the top k of the impression's shadow lists on its (sampled) session."""
    for shadow in event.shadow:
        top = shadow.results[:k]
        scores = [r.score for r in top]
        record.shadow_docs[shadow.ranker] = [r.doc_id for r in top]
        record.shadow_scores[shadow.ranker] = (None if any(s is None for s in scores)
                                               else [float(s or 0.0) for s in scores])


def coverage(docs: list[str], grades: Mapping[str, int]) -> float:
    return sum(1 for d in docs if d in grades) / len(docs) if docs else 0.0


SENT_FIELDS = ("sent_n", "sent_x", "sent_xx")
FOOTING_FIELDS = ("pair_wx", "pair_gx", "pair_wy", "pair_gy")


def footing_fields(served: Sequence[bool], shadow: Sequence[bool]) -> dict[str, float]:
    """How graded a pair's two lists are (issue 42): per list the discount mass, Σ 1 / log2(i + 1), of its
    ranks i ≤ k without a grade (``pair_wx`` served, ``pair_wy`` shadow) and with one (``pair_gx``,
    ``pair_gy``), from each rank's graded flag. A document without a grade counts 0 in DCG@k; when one
    list has more of them than the other (a candidate showing documents nobody graded yet, their grades
    late), the paired verdict allows for what they could add (:mod:`monitor.core.canary.paired_paths`).

    >>> footing_fields([True, False], [True, True])
    {'pair_wx': 0.6309297535714575, 'pair_gx': 1.0, 'pair_wy': 0.0, 'pair_gy': 1.6309297535714575}
    """
    def masses(graded: Sequence[bool]) -> tuple[float, float]:
        discounts = _DISCOUNTS if len(graded) <= len(_DISCOUNTS) else _discounts(len(graded))
        waiting = sum((discounts[i] for i, g in enumerate(graded) if not g), 0.0)
        return waiting, sum((discounts[i] for i, g in enumerate(graded) if g), 0.0)

    wx, gx = masses(served)
    wy, gy = masses(shadow)
    return dict(zip(FOOTING_FIELDS, (wx, gx, wy, gy), strict=True))


def _discounts(n: int) -> tuple[float, ...]:
    return tuple(1.0 / math.log2(i + 2.0) for i in range(n))


_DISCOUNTS = _discounts(256)


def sent_fields(x: float) -> dict[str, float]:
    """What every scored session the candidate sent a list for adds to its group, paired or not (its list
    empty, or below the coverage minimum): ``sent_n`` = 1 and the served list's DCG@k, ``sent_x``,
    ``sent_xx``. Against the bucket's served sessions they say which share of them the candidate's lists
    reach, and whether those differ from the others (the shadow coverage check, issue 42)."""
    return dict(zip(SENT_FIELDS, (1.0, x, x * x), strict=True))


def paired(record: SessionRecord, served: Mapping[str, float], judge: Judge,
           min_coverage: float) -> dict[str, dict[str, float]]:
    """Group → the contribution of each shadow list of the session: :func:`sent_fields`, and the paired
    fields against the served contribution ``served`` (a scored session's :func:`session_stats`) when the
    list reaches ``min_coverage``."""
    grades = record.effective()
    out: dict[str, dict[str, float]] = {}
    served_graded = [d in grades for d in record.docs[:record.k]]
    for ranker, docs in record.shadow_docs.items():
        fields = sent_fields(served["dcg"])
        if docs and coverage(docs, grades) >= min_coverage:
            shadow = session_stats(judge(docs, record.shadow_scores.get(ranker)), record.k)
            fields.update(paired_fields(served["dcg"], shadow["dcg"],
                                        (served["concordant"], served["discordant"]),
                                        (shadow["concordant"], shadow["discordant"])))
            fields.update(footing_fields(served_graded, [d in grades for d in docs[:record.k]]))
        out[shadow_group(record.bucket, ranker)] = fields
    return out


def take_back_paired(record: SessionRecord, out: Transition) -> None:
    """Take back the session's paired contributions (before a re-score, or as it expires)."""
    for group, old in record.shadow_contributions.items():
        out.deltas.append(Delta(record.ts, group, Stats(old), take_back=True))
    record.shadow_contributions = {}


def score_paired(record: SessionRecord, served: Mapping[str, float], judge: Judge, min_coverage: float,
                 out: Transition) -> None:
    """After the served list was scored: take back the old paired contributions, add the new ones
    (``shadow_scored`` counts a pair first added, or added again after it was taken back for a shadow
    list below the minimum or an expiry)."""
    if not record.shadow_docs:
        return
    before = {g for g, stats in record.shadow_contributions.items() if "pair_n" in stats}
    take_back_paired(record, out)
    new = paired(record, served, judge, min_coverage)
    for group, stats in new.items():
        out.deltas.append(Delta(record.ts, group, Stats(stats)))
        out.sightings.append((SHADOW, split_group(group)[1], record.ts))
        if "pair_n" in stats and group not in before:
            out.counters.append((Counter("shadow_scored", group), 1.0))
    record.shadow_contributions = new
