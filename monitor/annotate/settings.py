"""The bridge's settings: the worker's (Kafka, Redis, topics, app id; monitor/worker/settings.py) and its own.

Its own, from the environment (docs/annotate.md has the table):

* ``MONITOR_LABEL_STUDIO_URL``: Label Studio's base URL (required);
* ``MONITOR_LABEL_STUDIO_TOKEN`` or ``MONITOR_LABEL_STUDIO_TOKEN_FILE``: a personal access token (or a
  legacy token) of the account the bridge acts as (required);
* ``MONITOR_ANNOTATE_SECRET`` or ``MONITOR_ANNOTATE_SECRET_FILE``: the shared secret Label Studio sends in
  the ``X-Monitor-Annotate-Secret`` header of its webhooks (required);
* ``MONITOR_ANNOTATE_HOST`` / ``MONITOR_ANNOTATE_PORT``: where the webhook endpoint and ``/metrics`` listen
  (default ``127.0.0.1:9465``); ``MONITOR_ANNOTATE_WEBHOOK_URL``: the URL Label Studio calls (default
  ``http://HOST:PORT/webhook``);
* ``MONITOR_ANNOTATE_PROJECT``: the project's title (found, or created with the labelling config);
* ``MONITOR_ANNOTATE_DOC_URL``: a URL template for documents (``https://shop.example/item/{doc_id}``);
  ``MONITOR_ANNOTATE_DOCUMENTS``: a JSONL file of ``{"doc_id", "title", "snippet", "url"}``;
* ``MONITOR_ANNOTATE_RECONCILE_INTERVAL``: seconds between reconciliations with Label Studio (default 300);
* ``MONITOR_ANNOTATE_IMPORT_SIZE``: tasks per bulk import request (default 500);
* ``MONITOR_ANNOTATE_SCOPE``: ``query`` (default: one query-level grade per pair) or ``session`` (the grade
  as each asking session's own annotation);
* rater quality (docs/annotate.md, "Rater quality"): ``MONITOR_ANNOTATE_OVERLAP``, the share of pairs sent
  to two annotators (default 0.1); ``MONITOR_ANNOTATE_GOLD``, a JSONL file of gold pairs
  ``{"query", "doc_id", "grade"}`` (grade 高/中/低/无; optional ``title``, ``snippet``, ``url``, ``bucket``)
  and ``MONITOR_ANNOTATE_GOLD_SHARE``, the share of tasks that are gold (default 0.05, used only with a
  gold file); ``MONITOR_ANNOTATE_AGREEMENT``, the thresholds as ``alpha=0.667,kappa=0.5,gold=0.5,
  min_units=50,min_pairs=50,min_gold=20`` (any subset); ``MONITOR_ANNOTATE_AGREEMENT_WINDOW``, seconds of
  grades the agreement is measured over (default 86400, whole hours); ``MONITOR_ANNOTATE_ANNOTATOR_SALT``
  (or ``…_FILE``), the key of the hashed annotator labels (default none); ``MONITOR_ANNOTATE_MAX_ANNOTATORS``,
  how many annotators keep a label of their own (default 20, the rest are ``other``).

Secrets are kept out of ``repr`` and never logged; :func:`describe` shows whether they are set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.annotate.ratings import LEVEL_OF
from monitor.annotate.tasks import Document, pair_key
from monitor.core.agreement.tally import RaterThresholds
from monitor.core.errors import MonitorError
from monitor.services.found import FoundServices
from monitor.worker.settings import SettingsError, WorkerSettings, load_settings

SECRET_HEADER = "X-Monitor-Annotate-Secret"
SCOPES = ("query", "session")
#: the names ``MONITOR_ANNOTATE_AGREEMENT`` takes → the field of :class:`RaterThresholds`
THRESHOLD_NAMES = {"alpha": "alpha", "kappa": "annotator_kappa", "gold": "gold_exact",
                   "min_units": "min_units", "min_pairs": "min_pairs", "min_gold": "min_gold"}


@dataclass(frozen=True)
class GoldPair:
    """A pair whose grade is known (a gold task's answer), and what annotators see of it."""

    query: str
    doc_id: str
    level: int
    document: Document = field(default_factory=Document)
    bucket: str | None = None


@dataclass(frozen=True)
class AnnotateSettings:
    worker: WorkerSettings
    label_studio_url: str
    label_studio_token: str = field(repr=False)
    secret: str = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 9465
    webhook_url: str = ""
    project: str = "Search relevance"
    doc_url: str | None = None
    documents: dict[str, Document] = field(default_factory=dict, repr=False)
    reconcile_interval: float = 300.0
    scope: str = "query"
    import_size: int = 500
    overlap_share: float = 0.1
    gold: dict[str, GoldPair] = field(default_factory=dict, repr=False)
    gold_share: float = 0.05
    thresholds: RaterThresholds = field(default_factory=RaterThresholds)
    agreement_window: float = 86400.0
    annotator_salt: str = field(default="", repr=False)
    max_annotators: int = 20

    @property
    def consumer_group(self) -> str:
        return f"{self.worker.app_id}-annotate"

    @property
    def redis_prefix(self) -> str:
        return f"{self.worker.redis_prefix}:annotate"

    def document(self, doc_id: str) -> Document:
        """What annotators see of ``doc_id``: the documents file's entry, the URL template's URL."""
        known = self.documents.get(doc_id, Document())
        if known.url is None and self.doc_url:
            return Document(known.title, known.snippet, self.doc_url.replace("{doc_id}", doc_id))
        return known


def _secret(env: Mapping[str, str], name: str) -> str:
    value, path = env.get(name, ""), env.get(f"{name}_FILE", "")
    if value and path:
        raise SettingsError(f"environment: give {name} or {name}_FILE, not both")
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as error:
            raise SettingsError(f"{name}_FILE: cannot read {path!r} ({error.strerror})") from None
    if not value:
        raise SettingsError(f"{name} (or {name}_FILE) must be set")
    return value


def _rows(path: str, variable: str, encoding: str = "utf-8",
          expected: str = "an object") -> Iterator[tuple[int, dict[str, Any]]]:
    """``path``'s JSON-object lines with their numbers (blank lines skipped); :class:`SettingsError` naming
    ``variable`` when the file cannot be read, ``FILE:LINE`` when a line is not a JSON object (``expected``
    says what a line should be)."""
    try:
        lines = Path(path).read_text(encoding=encoding).splitlines()
    except OSError as error:
        raise SettingsError(f"{variable}: cannot read {path!r} ({error.strerror})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row: Any = json.loads(line)
        except ValueError:
            raise SettingsError(f"{path}:{number}: not JSON") from None
        if not isinstance(row, dict):
            raise SettingsError(f"{path}:{number}: expected {expected}")
        yield number, row


def _documents(path: str) -> dict[str, Document]:
    out: dict[str, Document] = {}
    expected = "an object with a string doc_id"
    for number, row in _rows(path, "MONITOR_ANNOTATE_DOCUMENTS", expected=expected):
        if not isinstance(row.get("doc_id"), str):
            raise SettingsError(f"{path}:{number}: expected {expected}")
        text = {k: row[k] for k in ("title", "snippet", "url") if isinstance(row.get(k), str)}
        out[row["doc_id"]] = Document(**text)
    return out


def _gold(path: str) -> dict[str, GoldPair]:
    """The gold file's pairs by pair key; :class:`SettingsError` naming the file, line and field."""
    out: dict[str, GoldPair] = {}
    for number, row in _rows(path, "MONITOR_ANNOTATE_GOLD", encoding="utf-8-sig"):
        for name in ("query", "doc_id"):
            if not isinstance(row.get(name), str) or not row[name]:
                raise SettingsError(f"{path}:{number}: {name}: expected a non-empty string")
        if row.get("grade") not in LEVEL_OF:
            raise SettingsError(f"{path}:{number}: grade: expected one of {', '.join(LEVEL_OF)}, "
                                f"got {row.get('grade')!r}")
        text = {k: row[k] for k in ("title", "snippet", "url") if isinstance(row.get(k), str) and row[k]}
        bucket = row.get("bucket") if isinstance(row.get("bucket"), str) else None
        key = pair_key(row["query"], row["doc_id"])
        if key in out and out[key].level != LEVEL_OF[row["grade"]]:
            raise SettingsError(f"{path}:{number}: ({row['query']!r}, {row['doc_id']!r}) has two grades")
        out[key] = GoldPair(row["query"], row["doc_id"], LEVEL_OF[row["grade"]], Document(**text), bucket)
    if not out:
        raise SettingsError(f"MONITOR_ANNOTATE_GOLD: {path} has no gold pair")
    return out


def _share(env: Mapping[str, str], name: str, default: str, upper_open: bool = False) -> float:
    text = env.get(name, default) or default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0.0 <= value < 1.0 if upper_open else 0.0 <= value <= 1.0):
        interval = "[0, 1)" if upper_open else "[0, 1]"
        raise SettingsError(f"{name}: must be a share in {interval}, got {text!r}")
    return value


def _thresholds(text: str) -> RaterThresholds:
    """``alpha=0.667,kappa=0.5,…`` (any subset, the rest default) as :class:`RaterThresholds`."""
    given: dict[str, float | int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        field_name = THRESHOLD_NAMES.get(name.strip())
        if not sep or field_name is None:
            raise SettingsError(f"MONITOR_ANNOTATE_AGREEMENT: {part!r} is not NAME=VALUE with NAME one of "
                                f"{', '.join(THRESHOLD_NAMES)}")
        try:
            given[field_name] = int(value) if field_name.startswith("min_") else float(value)
        except ValueError:
            raise SettingsError(f"MONITOR_ANNOTATE_AGREEMENT: {name.strip()}: {value.strip()!r} is not a "
                                "number") from None
    try:
        return RaterThresholds(**given)  # type: ignore[arg-type]
    except MonitorError as error:
        raise SettingsError(f"MONITOR_ANNOTATE_AGREEMENT: {error}") from None


def load_annotate_settings(env: Mapping[str, str], services: FoundServices | None = None) -> AnnotateSettings:
    """The bridge's settings from ``env`` (and the worker's config file, over the addresses of the running
    ``services``); :class:`SettingsError` if bad."""
    worker = load_settings(env, services=services)
    url = env.get("MONITOR_LABEL_STUDIO_URL", "").strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"MONITOR_LABEL_STUDIO_URL must be an http(s) URL, got {url!r}")
    port_text = env.get("MONITOR_ANNOTATE_PORT", "9465")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise SettingsError(f"MONITOR_ANNOTATE_PORT: must be an integer in 0..65535, got {port_text!r}")
    interval_text = env.get("MONITOR_ANNOTATE_RECONCILE_INTERVAL", "300")
    try:
        interval = float(interval_text)
    except ValueError:
        interval = -1.0
    if not interval > 0:
        raise SettingsError(f"MONITOR_ANNOTATE_RECONCILE_INTERVAL: must be a positive number of seconds, "
                            f"got {interval_text!r}")
    scope = env.get("MONITOR_ANNOTATE_SCOPE", "query") or "query"
    if scope not in SCOPES:
        raise SettingsError(f"MONITOR_ANNOTATE_SCOPE: must be one of {', '.join(SCOPES)}, got {scope!r}")
    size_text = env.get("MONITOR_ANNOTATE_IMPORT_SIZE", "500")
    if not size_text.isdigit() or not 1 <= int(size_text) <= 10_000:
        raise SettingsError(f"MONITOR_ANNOTATE_IMPORT_SIZE: must be an integer in 1..10000, "
                            f"got {size_text!r}")
    host = env.get("MONITOR_ANNOTATE_HOST", "127.0.0.1")
    port = int(port_text)
    documents = env.get("MONITOR_ANNOTATE_DOCUMENTS")
    gold = env.get("MONITOR_ANNOTATE_GOLD")
    window_text = env.get("MONITOR_ANNOTATE_AGREEMENT_WINDOW", "86400") or "86400"
    if not window_text.isdigit() or int(window_text) < 3600 or int(window_text) % 3600:
        raise SettingsError(f"MONITOR_ANNOTATE_AGREEMENT_WINDOW: must be a whole number of hours in seconds "
                            f"(3600, 7200, …), got {window_text!r}")
    keep_text = env.get("MONITOR_ANNOTATE_MAX_ANNOTATORS", "20") or "20"
    if not keep_text.isdigit() or not 1 <= int(keep_text) <= 200:
        raise SettingsError(f"MONITOR_ANNOTATE_MAX_ANNOTATORS: must be an integer in 1..200, "
                            f"got {keep_text!r}")
    salt = ""
    if env.get("MONITOR_ANNOTATE_ANNOTATOR_SALT") or env.get("MONITOR_ANNOTATE_ANNOTATOR_SALT_FILE"):
        salt = _secret(env, "MONITOR_ANNOTATE_ANNOTATOR_SALT")
        if len(salt.encode()) > 64:
            raise SettingsError("MONITOR_ANNOTATE_ANNOTATOR_SALT: at most 64 bytes")
    return AnnotateSettings(
        worker=worker, label_studio_url=url, label_studio_token=_secret(env, "MONITOR_LABEL_STUDIO_TOKEN"),
        secret=_secret(env, "MONITOR_ANNOTATE_SECRET"), host=host, port=port,
        webhook_url=env.get("MONITOR_ANNOTATE_WEBHOOK_URL") or f"http://{host}:{port}/webhook",
        project=env.get("MONITOR_ANNOTATE_PROJECT") or "Search relevance",
        doc_url=env.get("MONITOR_ANNOTATE_DOC_URL") or None,
        documents=_documents(documents) if documents else {}, reconcile_interval=interval, scope=scope,
        import_size=int(size_text), overlap_share=_share(env, "MONITOR_ANNOTATE_OVERLAP", "0.1"),
        gold=_gold(gold) if gold else {},
        gold_share=_share(env, "MONITOR_ANNOTATE_GOLD_SHARE", "0.05", upper_open=True),
        thresholds=_thresholds(env.get("MONITOR_ANNOTATE_AGREEMENT", "")),
        agreement_window=float(window_text), annotator_salt=salt, max_annotators=int(keep_text),
    )


def describe(settings: AnnotateSettings) -> dict[str, Any]:
    """The settings for the start-up log line, secrets hidden."""
    return {
        "label_studio_url": settings.label_studio_url, "label_studio_token": "set", "secret": "set",
        "listen": f"{settings.host}:{settings.port}", "webhook_url": settings.webhook_url,
        "project": settings.project, "requests_topic": settings.worker.topics.requests,
        "annotations_topic": settings.worker.topics.annotations, "group": settings.consumer_group,
        "documents": len(settings.documents), "doc_url": settings.doc_url,
        "reconcile_interval": settings.reconcile_interval, "scope": settings.scope,
        "import_size": settings.import_size, "overlap_share": settings.overlap_share,
        "gold_pairs": len(settings.gold), "gold_share": settings.gold_share if settings.gold else 0.0,
        "agreement_window": settings.agreement_window, "thresholds": settings.thresholds.__dict__,
        "annotator_salt": "set" if settings.annotator_salt else "none",
        "max_annotators": settings.max_annotators,
    }
