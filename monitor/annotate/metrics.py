"""The bridge's own counters, on a registry passed in (``/metrics`` of ``monitor annotate``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class BridgeMetrics:
    """Requests read, tasks created, webhooks by outcome, grades produced, Label Studio errors."""

    def __init__(self, registry: CollectorRegistry) -> None:
        prefix = "search_relevance_annotate"
        self.requests = Counter(f"{prefix}_requests", "Annotation requests read, by outcome (used, invalid)",
                                ["outcome"], registry=registry)
        self.tasks_created = Counter(f"{prefix}_tasks_created", "Label Studio tasks created (one per pair)",
                                     registry=registry)
        self.pairs_known = Counter(f"{prefix}_pairs_already_tasked",
                                   "Requested pairs that already had a task (no new task)", registry=registry)
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
