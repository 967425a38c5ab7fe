"""The bridge's own series, on a registry passed in (``/metrics`` of ``monitor annotate``).

Besides counters, whether the bridge keeps up with the requests (docs/annotate.md, "Keeping up"):

* ``…_backlog_requests``: requests waiting, those in the batch being handled and those in the topic
  past the bridge's position on its partitions (Kafka's high watermark less the position, as of the
  last fetch);
* ``…_oldest_request_age_seconds``: how long the oldest request of the batch being handled has waited
  (now less its Kafka timestamp), 0 when the bridge holds none: it grows while Label Studio is down or
  the bridge falls behind, and the alert ``SearchRelevanceAnnotateBehind`` reads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class BridgeMetrics:
    """Requests read, pairs asked, tasks created, webhooks by outcome, grades produced, Label Studio errors;
    the backlog and its oldest request's age."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        prefix = "search_relevance_annotate"
        self._clock = clock
        self._oldest: float | None = None
        self.requests = Counter(f"{prefix}_requests", "Annotation requests read, by outcome (used, invalid)",
                                ["outcome"], registry=registry)
        self.pairs_requested = Counter(f"{prefix}_pairs_requested",
                                       "(query, document) pairs asked for by the requests used, every time "
                                       "asked (tasks created + pairs already tasked)", registry=registry)
        self.tasks_created = Counter(f"{prefix}_tasks_created", "Label Studio tasks created (one per pair)",
                                     registry=registry)
        self.pairs_known = Counter(f"{prefix}_pairs_already_tasked",
                                   "Requested pairs that got no new task: a task existed, or the pair was "
                                   "asked for earlier in the same batch (every repeat)", registry=registry)
        self.task_imports = Counter(f"{prefix}_task_imports",
                                    "Bulk imports into Label Studio (one request, many tasks)",
                                    registry=registry)
        self.tasks_without_text = Counter(f"{prefix}_tasks_without_text",
                                          "Tasks created with no title, snippet or URL to show annotators "
                                          "(only the document id)", registry=registry)
        self.webhooks = Counter(f"{prefix}_webhooks", "Webhook deliveries, by outcome (accepted, ignored, "
                                "unauthorized, invalid)", ["outcome"], registry=registry)
        self.grades_produced = Counter(f"{prefix}_grades_produced",
                                       "Annotation events produced to the annotations topic",
                                       registry=registry)
        self.label_studio_errors = Counter(f"{prefix}_label_studio_errors",
                                           "Label Studio requests that failed (retried)", registry=registry)
        self.reconciliations = Counter(f"{prefix}_reconciliations",
                                       "Walks over the project's tasks (at start and periodically)",
                                       registry=registry)
        self.backlog = Gauge(f"{prefix}_backlog_requests",
                             "Annotation requests waiting: in the batch being handled and in the topic past "
                             "the bridge's position", registry=registry)
        age = Gauge(f"{prefix}_oldest_request_age_seconds",
                    "Age of the oldest request the bridge holds without its tasks yet (0: none)",
                    registry=registry)
        age.set_function(self.oldest_age)

    def holding(self, oldest_ts: float | None) -> None:
        """The bridge holds a batch whose oldest request was written at ``oldest_ts`` (seconds since the
        epoch); None: it holds none."""
        self._oldest = oldest_ts

    def oldest_age(self) -> float:
        return 0.0 if self._oldest is None else max(0.0, self._clock() - self._oldest)
