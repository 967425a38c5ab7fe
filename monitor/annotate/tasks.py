"""What the bridge puts into Label Studio and reads back, as pure functions (no I/O, no clock).

* :data:`WEBHOOK_ACTIONS`: what Label Studio calls the bridge for;
* :data:`LABEL_CONFIG`: the labelling interface: the query, the document, and the four grades 高/中/低/无
  (with their English names) as one single choice;
* :func:`pair_key`: the identity of a (query, document) pair, stored in the task's data, so that a pair
  requested by many sessions has one task;
* :func:`task_data`: a task's data from an annotation request and the document's description
  (:func:`request_document`: what the request carries of it);
* :func:`annotation_grade`: the grade one annotation gives (which of several counts is
  :mod:`monitor.annotate.ratings`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: (grade name on the four-level scale, what annotators read beside it), best first.
GRADES: tuple[tuple[str, str], ...] = (
    ("高", "high: what the query asks for"),
    ("中", "medium: partly relevant"),
    ("低", "low: barely related"),
    ("无", "none: irrelevant"),
)
#: the webhook actions the bridge subscribes to (Label Studio's names): an annotation saved, edited or
#: deleted. Not a task's creation, nor anything else: each would be a call for nothing.
ANNOTATION_ACTIONS = ("ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED")
DELETE_ACTION = "ANNOTATIONS_DELETED"
WEBHOOK_ACTIONS = (*ANNOTATION_ACTIONS, DELETE_ACTION)
#: how many session ids a task's data keeps (the rest are counted in ``session_count``)
MAX_SESSIONS = 20

LABEL_CONFIG = """<View>
  <Header value="Query"/>
  <Text name="query" value="$query"/>
  <Header value="Document"/>
  <Text name="document" value="$document"/>
  <Header value="How relevant is the document to the query?"/>
  <Choices name="grade" toName="query" choice="single-radio" showInline="true" required="true">
""" + "".join(
    f'    <Choice value="{name} {english}" alias="{name}"/>\n' for name, english in GRADES
) + """  </Choices>
</View>
"""


def pair_key(query: str, doc_id: str) -> str:
    """24 hex digits naming the (query, document) pair (SHA-256 of both, unambiguous for any strings).

    >>> pair_key("蓝牙耳机", "d-17") == pair_key("蓝牙耳机", "d-17") != pair_key("蓝牙耳机", "d-18")
    True
    """
    return hashlib.sha256(json.dumps([query, doc_id], ensure_ascii=False).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Document:
    """What annotators see of a document beyond its id (all optional)."""

    title: str | None = None
    snippet: str | None = None
    url: str | None = None

    def shows_nothing(self) -> bool:
        """No title, snippet or URL: annotators would see only the document's id."""
        return not (self.title or self.snippet or self.url)

    def or_else(self, other: Document) -> Document:
        """This document's fields, each missing one taken from ``other``."""
        return Document(self.title or other.title, self.snippet or other.snippet, self.url or other.url)


def request_document(request: Mapping[str, Any], doc_id: str) -> Document:
    """What an annotation request says of ``doc_id`` (its optional ``documents`` object: the title,
    snippet and URL the impression's results carried, docs/events.md); empty if nothing."""
    documents = request.get("documents")
    found = documents.get(doc_id) if isinstance(documents, dict) else None
    if not isinstance(found, dict):
        return Document()
    text = {k: found[k] for k in ("title", "snippet", "url") if isinstance(found.get(k), str) and found[k]}
    return Document(**text)


def describe(doc_id: str, document: Document) -> str:
    """The document's text on the labelling page: title, snippet, URL and id, one per line."""
    lines = [part for part in (document.title, document.snippet, document.url) if part]
    return "\n".join([*lines, f"id: {doc_id}"])


def task_data(request: Mapping[str, Any], doc_id: str, document: Document,
              sessions: Sequence[str]) -> dict[str, Any]:
    """The ``data`` of the task for ``doc_id`` of an annotation request (docs/events.md)."""
    query = str(request["query"])
    data: dict[str, Any] = {
        "query": query,
        "doc_id": doc_id,
        "document": describe(doc_id, document),
        "pair": pair_key(query, doc_id),
        "bucket": request.get("query_bucket"),
        "sessions": list(sessions)[:MAX_SESSIONS],
        "session_count": len(sessions),
    }
    for name in ("title", "snippet", "url"):
        value = getattr(document, name)
        if value:
            data[name] = value
    return data


class RequestError(ValueError):
    """An annotation request the bridge cannot use; the message says why."""


def parse_request(raw: bytes) -> dict[str, Any]:
    """An annotation request's JSON object, checked for what the bridge reads."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise RequestError(f"not JSON: {error}") from None
    if not isinstance(body, dict) or body.get("type") != "annotation_request":
        raise RequestError("not an annotation_request object")
    if not isinstance(body.get("query"), str) or not body["query"]:
        raise RequestError("query: expected a non-empty string")
    if not isinstance(body.get("session_id"), str) or not body["session_id"]:
        raise RequestError("session_id: expected a non-empty string")
    docs = body.get("doc_ids")
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) and d for d in docs):
        raise RequestError("doc_ids: expected a non-empty list of strings")
    return body


def grade_of_choice(choice: str) -> str | None:
    """The grade name of a chosen value: the alias (``高``) or the shown value (``高 high: …``)."""
    head = choice.strip().split(" ", 1)[0] if choice.strip() else ""
    names = {name for name, _ in GRADES}
    return head if head in names else None


@dataclass(frozen=True)
class GradeGiven:
    """The pair's current grade: which annotation gave it, when (its last change) and by whom."""

    annotation_id: int
    grade: str
    ts: float
    annotator: int | None

    def identity(self) -> str:
        """What makes two deliveries the same grade (a webhook delivered twice gives one grade)."""
        return f"{self.annotation_id}|{self.ts!r}|{self.grade}"


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def annotation_grade(annotation: Mapping[str, Any]) -> GradeGiven | None:
    """The grade one Label Studio annotation gives, or None (skipped, cancelled, no grade chosen)."""
    if annotation.get("was_cancelled") or not isinstance(annotation.get("id"), int):
        return None
    results = annotation.get("result")
    if not isinstance(results, list):
        return None
    for result in results:
        if not isinstance(result, dict) or result.get("from_name") != "grade":
            continue
        value = result.get("value")
        choices = value.get("choices") if isinstance(value, dict) else None
        if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], str):
            grade = grade_of_choice(choices[0])
            ts = _timestamp(annotation.get("updated_at")) or _timestamp(annotation.get("created_at"))
            if grade is not None and ts is not None:
                annotator = annotation.get("completed_by")
                if isinstance(annotator, dict):
                    annotator = annotator.get("id")
                who = annotator if isinstance(annotator, int) else None
                return GradeGiven(annotation["id"], grade, ts, who)
    return None
