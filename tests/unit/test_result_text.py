"""A result's optional text (``title``, ``snippet``, ``url``) from the impression to the annotation request
and the Label Studio task (issue 30): both decoders keep the same text, text they cannot use is dropped and
never refused (events valid before stay valid), and a sampled session's request carries the text of the
documents it asks about, which the bridge shows annotators."""

from __future__ import annotations

import json
from typing import Any

import pytest

from monitor.annotate.tasks import Document, parse_request, request_document, task_data
from monitor.core.decoding import fast_decode
from monitor.core.event_checks import decode_checked
from monitor.core.events import DEFAULT_LIMITS, Impression
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.store.memory import MemoryPipeline
from monitor.worker.outbox import request_json

LIMIT = DEFAULT_LIMITS.max_text_chars


def impression(results: list[dict[str, Any]], shadow: list[dict[str, Any]] | None = None) -> bytes:
    body: dict[str, Any] = {"type": "impression", "session_id": "s-1", "query": "蓝牙耳机", "ranker": "r1",
                            "variant": "control", "query_bucket": "tail", "ts": 1000.0, "results": results}
    if shadow is not None:
        body["shadow"] = [{"ranker": "r2", "results": shadow}]
    return json.dumps(body, ensure_ascii=False).encode()


@pytest.mark.parametrize(("given", "kept"), [
    ({"title": "Earbuds", "snippet": "40 h battery", "url": "https://x/d-1"},
     ("Earbuds", "40 h battery", "https://x/d-1")),
    ({}, (None, None, None)),
    ({"title": "", "snippet": "   ", "url": None}, (None, None, None)),  # blank: dropped
    ({"title": 7, "snippet": ["x"], "url": {"a": 1}}, (None, None, None)),  # not text: dropped
    ({"title": "降" * (LIMIT + 10)}, ("降" * LIMIT, None, None)),  # too long: cut
])
def test_both_decoders_keep_the_same_text_and_never_refuse_for_it(given: dict[str, Any],
                                                                    kept: tuple[Any, ...]) -> None:
    raw = impression([{"doc_id": "d-1", "position": 1, "score": 2.0, **given}, {"doc_id": "d-2", "position": 2}])
    reference = decode_checked(raw, FOUR_LEVEL_SCALE)
    assert isinstance(reference, Impression)
    first = reference.results[0]
    assert (first.title, first.snippet, first.url) == kept
    assert reference.results[1].title is None
    fast = fast_decode(raw, FOUR_LEVEL_SCALE)
    assert fast is None or fast == reference  # None: the reference decides (a type msgspec refuses)
    if all(isinstance(v, str) for v in given.values()):
        assert fast == reference  # text the fast path takes


def test_a_sampled_sessions_request_carries_the_text_of_the_documents_it_asks_about() -> None:
    pipeline = MemoryPipeline(StreamConfig(join_window=300), FOUR_LEVEL_SCALE, clock=lambda: None)
    pipeline.submit("annotations", b"s-1", json.dumps({"type": "annotation", "session_id": "s-1",
                                                       "doc_id": "d-2", "grade": "高"}).encode())
    pipeline.submit("impressions", b"s-1", impression(
        [{"doc_id": "d-1", "position": 1, "title": "Earbuds", "url": "https://x/d-1"},
         {"doc_id": "d-2", "position": 2, "title": "Judged already"},
         {"doc_id": "d-3", "position": 3}],
        shadow=[{"doc_id": "d-4", "position": 1, "snippet": "From the shadow list"},
                {"doc_id": "d-1", "position": 2, "title": "Not the served one's"}]))
    (request,) = pipeline.requests
    assert sorted(request.docs) == ["d-1", "d-3", "d-4"]  # d-2 has its grade
    assert request.documents == {"d-1": {"title": "Earbuds", "url": "https://x/d-1"},
                                 "d-4": {"snippet": "From the shadow list"}}
    published = parse_request(request_json(request))
    assert request_document(published, "d-1") == Document(title="Earbuds", url="https://x/d-1")
    assert request_document(published, "d-3").shows_nothing()
    data = task_data(published, "d-1", request_document(published, "d-1"), ["s-1"])
    assert data["document"] == "Earbuds\nhttps://x/d-1\nid: d-1" and data["title"] == "Earbuds"


def test_a_request_without_text_has_no_documents_field() -> None:
    pipeline = MemoryPipeline(StreamConfig(join_window=300), FOUR_LEVEL_SCALE, clock=lambda: None)
    pipeline.submit("impressions", b"s-1", impression([{"doc_id": "d-1", "position": 1}]))
    (request,) = pipeline.requests
    assert request.documents == {} and "documents" not in json.loads(request_json(request))


def test_a_request_carries_at_most_its_text_budget() -> None:
    from monitor.core.stream.transition import MAX_REQUEST_TEXT

    long = "x" * LIMIT
    pipeline = MemoryPipeline(StreamConfig(join_window=300), FOUR_LEVEL_SCALE, clock=lambda: None)
    results = [{"doc_id": f"d-{i}", "position": i + 1, "title": long, "snippet": long, "url": long}
               for i in range(40)]
    pipeline.submit("impressions", b"s-1", impression(results))
    (request,) = pipeline.requests
    carried = sum(len(v) for text in request.documents.values() for v in text.values())
    assert carried <= MAX_REQUEST_TEXT < carried + 3 * LIMIT  # full up to the document that would not fit
    assert list(request.documents) == request.docs[:len(request.documents)]  # the first ones, in rank order
    assert len(request_json(request)) < 1_000_000
