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
  as each asking session's own annotation).

Secrets are kept out of ``repr`` and never logged; :func:`describe` shows whether they are set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.annotate.tasks import Document
from monitor.services.found import FoundServices
from monitor.worker.settings import SettingsError, WorkerSettings, load_settings

SECRET_HEADER = "X-Monitor-Annotate-Secret"
SCOPES = ("query", "session")


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


def _documents(path: str) -> dict[str, Document]:
    out: dict[str, Document] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SettingsError(f"MONITOR_ANNOTATE_DOCUMENTS: cannot read {path!r} ({error.strerror})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row: Any = json.loads(line)
        except ValueError:
            raise SettingsError(f"{path}:{number}: not JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get("doc_id"), str):
            raise SettingsError(f"{path}:{number}: expected an object with a string doc_id")
        text = {k: row[k] for k in ("title", "snippet", "url") if isinstance(row.get(k), str)}
        out[row["doc_id"]] = Document(**text)
    return out


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
    return AnnotateSettings(
        worker=worker, label_studio_url=url, label_studio_token=_secret(env, "MONITOR_LABEL_STUDIO_TOKEN"),
        secret=_secret(env, "MONITOR_ANNOTATE_SECRET"), host=host, port=port,
        webhook_url=env.get("MONITOR_ANNOTATE_WEBHOOK_URL") or f"http://{host}:{port}/webhook",
        project=env.get("MONITOR_ANNOTATE_PROJECT") or "Search relevance",
        doc_url=env.get("MONITOR_ANNOTATE_DOC_URL") or None,
        documents=_documents(documents) if documents else {}, reconcile_interval=interval, scope=scope,
        import_size=int(size_text),
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
        "import_size": settings.import_size,
    }
