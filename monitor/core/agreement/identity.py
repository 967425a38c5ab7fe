"""Bounded annotator labels: never an annotator's own id or name as a Prometheus label value.

An annotator id (a Label Studio user id, an e-mail) becomes :func:`annotator_label`, ``r-`` and six hex
digits of a keyed blake2b hash: stable across processes, not free text, and one-way without the salt. Only
the ``keep`` annotators with the most graded pairs keep their label (:func:`cap_annotators`); the others
are exported together as ``other``, their counts summed, which is exact because they are counts. Whoever
knows an id and the salt can compute its label, so an on-call engineer can find the annotator behind one
(docs/annotate.md, "Rater quality").

>>> annotator_label(3) == annotator_label("3"), annotator_label(3).startswith("r-"), len(annotator_label(3))
(True, True, 8)
>>> cap_annotators({"7": 50, "8": 40, "9": 1}, 2)["9"]
'other'
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from monitor.core.errors import MonitorError

OTHER = "other"
LABEL_HEX = 6


def annotator_label(annotator: str | int, salt: str = "") -> str:
    """``r-`` and the first six hex digits of blake2b(annotator id, key=salt)."""
    if isinstance(annotator, bool) or not isinstance(annotator, str | int):
        raise MonitorError(f"an annotator id is a string or an integer, got {annotator!r}")
    text = str(annotator).strip()
    if not text:
        raise MonitorError("an annotator id must not be empty")
    key = salt.encode("utf-8")
    if len(key) > 64:
        raise MonitorError(f"the annotator salt is at most 64 bytes, got {len(key)}")
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key).hexdigest()
    return f"r-{digest[:LABEL_HEX]}"


def cap_annotators(volumes: Mapping[str, int], keep: int, salt: str = "") -> dict[str, str]:
    """annotator id → exported label: the ``keep`` with the largest volume (ties by id) get their
    :func:`annotator_label`, the rest ``other``."""
    if keep < 0:
        raise MonitorError(f"keep must be ≥ 0, got {keep}")
    ranked = sorted(volumes, key=lambda a: (-volumes[a], a))
    kept = set(ranked[:keep])
    return {a: annotator_label(a, salt) if a in kept else OTHER for a in volumes}
