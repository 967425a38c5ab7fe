"""A small Label Studio client over HTTP (aiohttp): projects, tasks, annotations, webhooks.

Authentication: a personal access token (a JWT refresh token; the default in Label Studio 1.20+) is
exchanged at ``POST /api/token/refresh`` for a short-lived access token sent as ``Bearer``, renewed when
Label Studio answers 401; a legacy token is sent as ``Token <key>``. Tokens never appear in messages or
logs: errors name the method, the path and the status only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

#: seconds an import may take: an import that times out may still be applied (a busy SQLite Label Studio
#: took over 30 s for 500 tasks while annotators saved grades), and one retried before it is applied is
#: made twice, so imports wait far longer than other calls
IMPORT_TIMEOUT = 300.0


class LabelStudioError(RuntimeError):
    """Label Studio could not be reached or refused a request; ``status`` is None when unreachable."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def is_personal_access_token(token: str) -> bool:
    """A JWT (three base64url parts): a personal access token, used through the refresh flow."""
    return token.count(".") == 2 and token.startswith("eyJ")


class LabelStudio:
    """The Label Studio at ``url`` with ``token``; use as ``async with LabelStudio(...) as ls``."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._access: str | None = None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"LabelStudio({self.url!r}, token=***)"

    async def __aenter__(self) -> LabelStudio:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _authorization(self, renew: bool = False) -> str:
        if not is_personal_access_token(self._token):
            return f"Token {self._token}"
        if self._access is None or renew:
            body = await self._send("POST", "/api/token/refresh", {"refresh": self._token}, auth=False)
            if not isinstance(body, dict) or not isinstance(body.get("access"), str):
                raise LabelStudioError("POST /api/token/refresh: no access token in the answer")
            self._access = body["access"]
        return f"Bearer {self._access}"

    async def _send(self, method: str, path: str, payload: Any = None, *, auth: bool = True,
                    params: dict[str, Any] | None = None, renew: bool = False,
                    timeout: float | None = None) -> Any:
        if self._session is None:
            raise RuntimeError("LabelStudio is used outside 'async with'")
        headers = {"Authorization": await self._authorization(renew)} if auth else {}
        limit = None if timeout is None else aiohttp.ClientTimeout(total=timeout)
        try:
            async with self._session.request(method, self.url + path, json=payload, params=params,
                                             headers=headers, timeout=limit) as response:
                if response.status == 401 and auth and not renew and is_personal_access_token(self._token):
                    return await self._send(method, path, payload, params=params, renew=True, timeout=timeout)
                if response.status >= 400:
                    text = (await response.text())[:300]
                    raise LabelStudioError(f"{method} {path}: HTTP {response.status}: {text}",
                                           response.status)
                if response.status == 204:
                    return None
                return await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            reason = type(error).__name__
            raise LabelStudioError(f"{method} {path}: Label Studio unreachable ({reason})") from None

    # projects ------------------------------------------------------------------------------------------
    async def find_or_create_project(self, title: str, label_config: str) -> int:
        """The id of the project called ``title``; created with ``label_config`` if there is none."""
        page = 1
        while True:
            body = await self._send("GET", "/api/projects", params={"page": page, "page_size": 100,
                                                                     "title": title})
            results = body.get("results", []) if isinstance(body, dict) else body
            for project in results:
                if project.get("title") == title:
                    return int(project["id"])
            if not isinstance(body, dict) or not body.get("next"):
                break
            page += 1
        created = await self._send("POST", "/api/projects", {
            "title": title, "label_config": label_config,
            "description": "Search relevance: grade each document for its query (monitor annotate)",
            "show_skip_button": True, "maximum_annotations": 1,
        })
        return int(created["id"])

    # tasks ---------------------------------------------------------------------------------------------
    async def create_task(self, project: int, data: dict[str, Any]) -> int:
        """One task (one request): what the bridge did before bulk imports, kept as their peer."""
        created = await self._send("POST", "/api/tasks", {"project": project, "data": data})
        return int(created["id"])

    async def import_tasks(self, project: int, datas: Sequence[dict[str, Any]]) -> list[int]:
        """Many tasks in one request (``POST /api/projects/<id>/import?return_task_ids=true``, a list of
        ``{"data": …}``): their ids, in the order given. Label Studio's Community edition imports
        synchronously and answers with ``task_ids``; an edition that imports in the background answers
        without them, which is an error here (:class:`LabelStudioError`): the bridge needs each task's id."""
        if not datas:
            return []
        body = await self._send("POST", f"/api/projects/{project}/import", [{"data": d} for d in datas],
                                params={"return_task_ids": "true"}, timeout=IMPORT_TIMEOUT)
        ids = body.get("task_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or len(ids) != len(datas) or not all(isinstance(i, int) for i in ids):
            raise LabelStudioError(f"POST /api/projects/{project}/import: expected {len(datas)} task ids "
                                   "in the answer (a background import gives none)")
        return [int(i) for i in ids]

    async def set_overlap(self, task_id: int, overlap: int, labeled: bool = False) -> None:
        """Ask ``overlap`` annotators for the task. Label Studio sets a task's ``overlap`` from the
        project's ``maximum_annotations`` (1 here) when it is imported and calls it done (``is_labeled``)
        once it has that many annotations; it does not recompute ``is_labeled`` when ``overlap`` is
        patched, so ``labeled`` is sent with it (False: the task goes back to the annotators' queue)."""
        await self._send("PATCH", f"/api/tasks/{task_id}", {"overlap": overlap, "is_labeled": labeled})

    async def update_task_data(self, task_id: int, data: dict[str, Any]) -> None:
        await self._send("PATCH", f"/api/tasks/{task_id}", {"data": data})

    async def task(self, task_id: int) -> dict[str, Any] | None:
        """The task with its data (None if it was deleted)."""
        try:
            body = await self._send("GET", f"/api/tasks/{task_id}")
        except LabelStudioError as error:
            if error.status == 404:
                return None
            raise
        return body if isinstance(body, dict) else None

    async def annotations(self, task_id: int) -> list[dict[str, Any]]:
        body = await self._send("GET", f"/api/tasks/{task_id}/annotations")
        return list(body) if isinstance(body, list) else []

    async def tasks(self, project: int, since: datetime | None = None,
                    page_size: int = 500) -> AsyncIterator[dict[str, Any]]:
        """Every task of the project with its data and annotations, page by page; with ``since`` only
        those updated since then (Label Studio updates a task when one of its annotations is saved or
        deleted), through its data manager's filter on ``updated_at``."""
        params: dict[str, Any] = {"project": project, "page_size": page_size, "fields": "all"}
        if since is not None:
            value = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            params["query"] = json.dumps({"filters": {"conjunction": "and", "items": [
                {"filter": "filter:tasks:updated_at", "operator": "greater_or_equal", "type": "Datetime",
                 "value": value}]}})
        page = 1
        while True:
            try:
                body = await self._send("GET", "/api/tasks", params={**params, "page": page})
            except LabelStudioError as error:
                if error.status == 404:  # past the last page
                    return
                raise
            tasks = body.get("tasks", []) if isinstance(body, dict) else body
            for task in tasks:
                yield task
            if len(tasks) < page_size:
                return
            page += 1

    async def server_time(self) -> datetime:
        """Label Studio's clock (its ``Date`` header, whole seconds), for checkpoints on ``updated_at``."""
        if self._session is None:
            raise RuntimeError("LabelStudio is used outside 'async with'")
        try:
            async with self._session.get(self.url + "/health") as response:
                date = response.headers.get("Date")
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            reason = type(error).__name__
            raise LabelStudioError(f"GET /health: Label Studio unreachable ({reason})") from None
        if not date:
            raise LabelStudioError("GET /health: no Date header")
        return parsedate_to_datetime(date)

    # webhooks ------------------------------------------------------------------------------------------
    async def ensure_webhook(self, project: int, url: str, headers: dict[str, str],
                             actions: Sequence[str]) -> int:
        """The project's webhook to ``url`` for ``actions`` only, with ``headers`` (created, or updated:
        a webhook made for every action by an older bridge is narrowed to these)."""
        body = await self._send("GET", "/api/webhooks", params={"project": project})
        hooks = body if isinstance(body, list) else []
        payload = {"project": project, "url": url, "send_payload": True, "send_for_all_actions": False,
                   "actions": list(actions), "headers": headers, "is_active": True}
        for hook in hooks:
            if hook.get("url") == url:
                await self._send("PATCH", f"/api/webhooks/{hook['id']}", payload)
                return int(hook["id"])
        created = await self._send("POST", "/api/webhooks", payload)
        return int(created["id"])
