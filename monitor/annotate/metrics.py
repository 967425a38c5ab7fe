"""The bridge's own series, on a registry passed in (``/metrics`` of ``monitor annotate``).

Besides counters, whether the bridge keeps up with the requests (docs/annotate.md, "Keeping up"):

* ``…_backlog_requests``: requests waiting, those in the batch being handled and those in the topic
  past the bridge's position on its partitions (Kafka's high watermark less the position, as of the
  last fetch);
* ``…_oldest_request_age_seconds``: how long the oldest request of the batch being handled has waited
  (now less its Kafka timestamp), 0 when the bridge holds none: it grows while Label Studio is down or
  the bridge falls behind, and the alert ``SearchRelevanceAnnotateBehind`` reads it.

And the rater quality of the last ``agreement_window`` (docs/annotate.md, "Rater quality"), set from the
counts in Redis at each scrape by :meth:`BridgeMetrics.show_quality`: ordinal alpha per bucket and over all
(``…_agreement_alpha{bucket}``, with the overlapped pairs behind it), each annotator's quadratic kappa
against their peers and gold accuracy (``annotator`` is a hashed label, ``identity.cap_annotators``), and
``…_agreement_low{measure,bucket,annotator}``: 1 for a value below its threshold with enough counts behind
it, 0 for one above; a value with too few counts is not exported there (no data is not a pass). The
alert ``SearchRelevanceRaterAgreementLow`` reads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from monitor.core.agreement.identity import cap_annotators
from monitor.core.agreement.tally import RaterTally, RaterThresholds, assess


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
        self.overlap_tasks = Counter(f"{prefix}_overlap_tasks", "Tasks sent to two annotators (the overlap "
                                     "share of pairs)", registry=registry)
        self.third_opinions = Counter(f"{prefix}_third_opinions", "Tasks reopened for a third annotator: "
                                      "their first two grades differed by more than one step",
                                      registry=registry)
        self.gold_tasks = Counter(f"{prefix}_gold_tasks", "Gold tasks (pairs with a known grade) mixed in",
                                  registry=registry)
        self.alpha = Gauge(f"{prefix}_agreement_alpha", "Krippendorff's alpha (ordinal) of the overlapped "
                           "pairs' first two grades, per bucket and over all (bucket=\"all\")", ["bucket"],
                           registry=registry)
        self.units = Gauge(f"{prefix}_agreement_units", "Overlapped pairs with two grades behind the alpha",
                           ["bucket"], registry=registry)
        self.kappa = Gauge(f"{prefix}_annotator_kappa", "An annotator's quadratic-weighted Cohen's kappa "
                           "against the other grade of the pairs they shared", ["annotator"],
                           registry=registry)
        self.shared = Gauge(f"{prefix}_annotator_pairs", "Pairs an annotator shared with another annotator",
                            ["annotator"], registry=registry)
        self.gold_accuracy = Gauge(f"{prefix}_annotator_gold_accuracy", "An annotator's share of gold tasks "
                                   "graded exactly right (match=exact) or within one step (match=within_one)",
                                   ["annotator", "match"], registry=registry)
        self.gold_answers = Gauge(f"{prefix}_annotator_gold_answers", "Gold tasks an annotator answered",
                                  ["annotator"], registry=registry)
        self.low = Gauge(f"{prefix}_agreement_low", "1: a rater-quality value below its threshold, with "
                         "enough counts behind it; 0: above it (too few counts: not exported)",
                         ["measure", "bucket", "annotator"], registry=registry)
        self.threshold = Gauge(f"{prefix}_agreement_threshold", "The thresholds the low series use",
                               ["measure"], registry=registry)
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

    def show_quality(self, tally: RaterTally, thresholds: RaterThresholds, *, keep: int, salt: str) -> None:
        """Set the rater-quality gauges from ``tally`` (annotator ids as keys): the ``keep`` busiest
        annotators under their hashed label, the rest summed as ``other``; every series not in it is
        removed (an annotator gone from the window, a value that became undefined)."""
        volumes = {rater: tally.peers[rater].total if rater in tally.peers else 0
                   for rater in tally.peers.keys() | tally.gold.keys()}
        for rater, matrix in tally.gold.items():
            volumes[rater] += matrix.total
        shown = tally.merged_by(cap_annotators(volumes, keep, salt))
        for gauge in (self.alpha, self.units, self.kappa, self.shared, self.gold_accuracy, self.gold_answers,
                      self.low):
            gauge.clear()
        for measure, value in (("alpha", thresholds.alpha), ("kappa", thresholds.annotator_kappa),
                               ("gold_exact", thresholds.gold_exact)):
            self.threshold.labels(measure=measure).set(value)
        for finding in assess(shown, thresholds):
            bucket, annotator = (finding.key, "") if finding.scope == "bucket" else ("", finding.key)
            if finding.measure == "alpha":
                self.units.labels(bucket=bucket).set(finding.count)
                if finding.value is not None:
                    self.alpha.labels(bucket=bucket).set(finding.value)
            elif finding.measure == "kappa":
                self.shared.labels(annotator=annotator).set(finding.count)
                if finding.value is not None:
                    self.kappa.labels(annotator=annotator).set(finding.value)
            else:
                self.gold_answers.labels(annotator=annotator).set(finding.count)
                gold = shown.gold.get(annotator)
                within = gold.within_share(1) if gold is not None else None
                if finding.value is not None and within is not None:
                    self.gold_accuracy.labels(annotator=annotator, match="exact").set(finding.value)
                    self.gold_accuracy.labels(annotator=annotator, match="within_one").set(within)
            if finding.status != "inconclusive":
                self.low.labels(measure=finding.measure, bucket=bucket, annotator=annotator).set(
                    1.0 if finding.status == "low" else 0.0)
