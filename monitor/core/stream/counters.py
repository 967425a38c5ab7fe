"""Counters as typed keys: :class:`Counter` (a name, the group it counts in, and for the labelled families
the label value), the named constructors of those families, and the one encoding of a counter as the
field of the partition's ``cnt`` hash in Redis (:func:`encode_field`, :func:`decode_field`).

The field is ``<group>|<name>``, or ``<group>|<name>:<label>`` for a labelled one: ``|dead_letter:<code>``,
``|labels_dropped:evicted``, ``|undeclared:<reason>``, ``tail|r1|control|impressions``. A group may hold
``|`` (it is ``bucket|ranker|variant``) and ``:``, a label may hold ``:``; a name may hold neither and a
label no ``|``, which is what makes the field read back as the counter it was written from.

>>> encode_field(dead_letter("invalid_json")), encode_field(Counter("impressions", "tail|r1|control"))
('|dead_letter:invalid_json', 'tail|r1|control|impressions')
>>> decode_field("|undeclared:variant")
Counter(name='undeclared', group='', label='variant')
"""

from __future__ import annotations

from msgspec import Struct

from monitor.core.errors import MonitorError

DEAD_LETTER = "dead_letter"
"""Invalid events by reason code (``search_relevance_dead_letters_total{reason}``)."""
LABELS_DROPPED = "labels_dropped"
"""Grades dropped without scoring anything, by reason (``search_relevance_labels_dropped_total{reason}``)."""
UNDECLARED = "undeclared"
"""Impressions of an undeclared variant or ranker, by which, and shadow lists of an undeclared ranker
dropped from their impressions (:data:`SHADOW_RANKER`):
``search_relevance_undeclared_impressions_total{reason}``."""


class Counter(Struct, frozen=True, gc=False, order=True, array_like=True):
    """One counter's key: ``name`` (``impressions``, ``dead_letter`` …), ``group`` (``bucket|ranker|variant``,
    or "" for a counter of the partition as a whole) and ``label``, the label value of a labelled family
    ("" for the others). A frozen msgspec struct: hashable, ordered, made at about the cost of a tuple
    (several per message), and a MessagePack array where it is stored (the rollup)."""

    name: str
    group: str = ""
    label: str = ""


def _labelled(name: str, label: str) -> Counter:
    if not label or "|" in label:
        raise MonitorError(f"a {name} counter's label must be non-empty and without '|': {label!r}")
    return Counter(name, "", label)


def dead_letter(code: str) -> Counter:
    """The counter of dead letters with reason ``code`` (an :data:`~monitor.core.events.REASON_CODES`)."""
    return _labelled(DEAD_LETTER, code)


def labels_dropped(reason: str) -> Counter:
    """The counter of grades dropped for ``reason`` (``evicted``: :data:`LABELS_EVICTED`)."""
    return _labelled(LABELS_DROPPED, reason)


def undeclared(reason: str) -> Counter:
    """The counter of impressions whose ``reason`` (``variant`` or ``ranker``) is not declared, or of
    shadow lists dropped for an undeclared ranker (``shadow_ranker``: :data:`SHADOW_RANKER`)."""
    return _labelled(UNDECLARED, reason)


SHADOW_RANKER = undeclared("shadow_ranker")
"""Shadow lists dropped from their impressions: their ranker does not match ``ranker_pattern``
(:func:`monitor.core.stream.admission.declared_shadow`)."""
LABELS_EVICTED = labels_dropped("evicted")
"""Early labels dropped because more than ``max_early_sessions`` sessions' labels waited."""
EARLY_SESSIONS_EVICTED = Counter("early_sessions_evicted")
"""The sessions whose early labels were dropped so."""
STALE_LABELS = Counter("stale_labels")
"""Grades of the partition (not of a session's group) that lost to a held grade with a later ``ts``."""


def encode_field(counter: Counter) -> str:
    """The field of ``counter`` in the ``cnt`` hash (module docstring); :class:`MonitorError` for a
    counter no field reads back as: an empty name, a name with ``|`` or ``:``, a label with ``|``."""
    name, label = counter.name, counter.label
    if not name or "|" in name or ":" in name:
        raise MonitorError(f"a counter's name must be non-empty and without '|' or ':': {name!r}")
    if not label:
        return f"{counter.group}|{name}"
    if "|" in label:
        raise MonitorError(f"a counter's label must not contain '|': {label!r} (counter {name!r})")
    return f"{counter.group}|{name}:{label}"


def decode_field(field: str) -> Counter:
    """The counter :func:`encode_field` wrote as ``field``; :class:`MonitorError` for a field it cannot
    have written (no ``|``, an empty name or an empty label after ``:``)."""
    group, bar, tail = field.rpartition("|")
    name, colon, label = tail.partition(":")
    if not bar or not name or (colon and not label):
        raise MonitorError(f"not a counter field: {field!r} (expected <group>|<name> or "
                           "<group>|<name>:<label>)")
    return Counter(name, group, label)
