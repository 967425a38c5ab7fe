"""The disagreement policy: which pairs get a second annotator, when a third is asked, which grade counts.

One set of pure functions, so that the stream (the bridge, when it is wired) and an offline
recomputation choose the same grade from the same annotations (docs/annotate.md, "Rater quality"):

* **Overlap.** A (query, document) pair is sent to two annotators when :func:`in_share` of its key with
  salt ``"overlap"`` is true: a stable hash of the key, so every process and every restart picks the same
  pairs, about ``share`` of them.
* **A third annotator** is asked when the first two grades differ by more than ``max_gap`` levels (one
  step by default: 高 vs 中 is an honest difference of judgment, 高 vs 低 is not): :func:`needs_third`.
  Never a fourth: three grades always give a middle one.
* **The grade that counts** is :func:`chosen_grade`, the median of the grades given, and with an even
  number of grades the lower of the two middle ones. One grade is itself; of two grades (a gap of one
  step, or two grades still waiting for their third) the lower; of three, the middle one, whoever gave it.
  Why: the median is the level-respecting choice for an ordinal scale (a mean of levels would invent a
  grade nobody gave and assume equal steps between 无/低/中/高); it does not depend on the order in which
  the grades arrived, so a replay or an offline run gets the same grade whatever the delivery order; and
  the lower middle errs on the side of a lower DCG, which an alert shows and someone looks at, rather than
  a higher one that hides a drop. The bias is at most one step, on the overlapped pairs whose two grades
  differ, and it is the same for both arms of a canary comparison.
* **What agreement is measured on.** The first two grades of an overlapped pair (:func:`measured`): the
  overlap is a random sample of pairs, but the third grade is asked only where the first two disagree, so
  counting it would measure a biased sample.

>>> needs_third([3, 1]), needs_third([3, 2]), chosen_grade([3, 1]), chosen_grade([3, 0, 1])
(True, False, 1, 1)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from monitor.core.errors import MonitorError

MAX_GAP = 1
MAX_GRADES = 3


def _check_grades(levels: Sequence[int]) -> list[int]:
    out = []
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise MonitorError(f"a grade's level is an integer ≥ 0, got {level!r}")
        out.append(level)
    return out


def needs_third(levels: Sequence[int], max_gap: int = MAX_GAP) -> bool:
    """True when exactly two grades were given and they differ by more than ``max_gap`` levels."""
    if max_gap < 0:
        raise MonitorError(f"max_gap must be ≥ 0, got {max_gap}")
    grades = _check_grades(levels)
    return len(grades) == 2 and abs(grades[0] - grades[1]) > max_gap


def chosen_grade(levels: Sequence[int]) -> int:
    """The grade that counts: the median, the lower middle one of an even number (module docstring)."""
    grades = sorted(_check_grades(levels))
    if not grades:
        raise MonitorError("no grade to choose from: a pair without grades has no grade")
    return grades[(len(grades) - 1) // 2]


def measured(levels_in_order: Sequence[int]) -> list[int]:
    """The grades agreement is measured on: the first two given (module docstring)."""
    return _check_grades(levels_in_order)[:2]


def in_share(key: str, share: float, salt: str) -> bool:
    """Whether ``key`` is in a stable ``share`` of all keys: blake2b of salt and key as a fraction in
    [0, 1) below ``share``. The same answer in every process; different salts pick independent sets.

    >>> in_share("蓝牙耳机|d-17", 1.0, "overlap"), in_share("蓝牙耳机|d-17", 0.0, "overlap")
    (True, False)
    """
    if not 0.0 <= share <= 1.0:
        raise MonitorError(f"share must be in [0, 1], got {share!r}")
    digest = hashlib.blake2b(f"{salt}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < share


def gold_to_add(tasks: int, gold: int, share: float) -> int:
    """How many gold tasks to mix in now so that at least ``share`` of all tasks are gold, with ``tasks``
    ordinary tasks and ``gold`` gold ones made so far: ceil(share · tasks / (1 − share)) − gold, ≥ 0.

    >>> gold_to_add(95, 0, 0.05), gold_to_add(95, 5, 0.05), gold_to_add(0, 0, 0.05)
    (5, 0, 0)
    """
    if not 0.0 <= share < 1.0:
        raise MonitorError(f"gold share must be in [0, 1), got {share!r}")
    if tasks < 0 or gold < 0:
        raise MonitorError(f"task counts must be ≥ 0, got tasks={tasks}, gold={gold}")
    wanted = math.ceil(share * tasks / (1.0 - share) - 1e-9)  # 1e-9: 0.05 · 95 / 0.95 is 5.000…01
    return max(wanted - gold, 0)
