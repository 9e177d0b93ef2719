"""Cloud Logging v2's ``entries:list`` over the entries the emulated workloads write.

``POST /v2/entries:list`` ``{resourceNames, filter, orderBy, pageSize, pageToken}`` ->
``{entries, nextPageToken}``. ``orderBy`` is ``timestamp asc`` (default) or ``timestamp desc``; ties
are ordered by ``insertId`` (the emulator's are zero-padded counters, so they sort as written).
``pageSize`` defaults to 50 and is rejected above 1000 or below 0, as Google does. A page token names
the last entry returned, so entries written between two pages neither repeat nor shift the next page.
"""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.errors import ApiError, json_response
from gcptui.remote.emulator.logging.query import QueryError, compile_filter, parse_time

DEFAULT_PAGE = 50
MAX_PAGE = 1000
MAX_ENTRIES = 200_000  # oldest dropped beyond it: a chatty worker cannot grow the emulator without end


def rfc3339(moment: datetime) -> str:
    """``2026-11-27T06:10:00.123456Z`` (Logging writes nanoseconds; microseconds are what we have)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LogStore:
    """Every entry written, in write order; ``changed`` wakes waiters when one arrives."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.entries: list[dict[str, Any]] = []
        self._counter = 0
        self.changed = asyncio.Event()

    def write(
        self, log_id: str, resource: dict[str, Any], message: str, severity: str = "INFO",
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Append one entry stamped now (its text in ``jsonPayload.message``, as Vertex AI writes them)."""
        self._counter += 1
        now = rfc3339(datetime.now(UTC))
        entry: dict[str, Any] = {
            "insertId": f"{self._counter:016x}",
            "jsonPayload": {"message": message, "levelname": severity},
            "resource": resource,
            "timestamp": now,
            "severity": severity,
            "logName": f"projects/{self.project}/logs/{log_id}",
            "receiveTimestamp": now,
        }
        if labels:
            entry["labels"] = dict(labels)
        self.entries.append(entry)
        if len(self.entries) > MAX_ENTRIES:
            del self.entries[: len(self.entries) - MAX_ENTRIES]
        self.changed.set()
        self.changed = asyncio.Event()
        return entry


def _sort_key(entry: dict[str, Any]) -> tuple[datetime, str]:
    return parse_time(entry["timestamp"]), entry["insertId"]


def _token(entry: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps([entry["timestamp"], entry["insertId"]]).encode()).decode()


def _after_token(token: str, descending: bool) -> Any:
    try:
        stamp, insert_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        bound = (parse_time(stamp), str(insert_id))
    except (ValueError, TypeError, QueryError):
        raise ApiError(400, "Invalid page token", "badRequest") from None
    if descending:
        return lambda entry: _sort_key(entry) < bound
    return lambda entry: _sort_key(entry) > bound


class LoggingApi:
    """The ``entries:list`` route on the shared server."""

    def __init__(self, store: LogStore, project: str, project_number: str) -> None:
        self.store = store
        self.project = project
        self._parents = {f"projects/{project}", f"projects/{project_number}"}
        self.calls = 0

    async def list_entries(self, request: web.Request) -> web.Response:
        self.calls += 1
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "Invalid JSON payload received.", "badRequest") from None
        if not isinstance(body, dict):
            raise ApiError(400, "Invalid JSON payload received.", "badRequest")
        names = body.get("resourceNames") or []
        if not isinstance(names, list) or not names:
            raise ApiError(400, "resource_names: Field required", "badRequest")
        for name in names:
            if name not in self._parents:
                raise ApiError(403, f"The caller does not have permission on {name}", "forbidden")
        try:
            size = int(body.get("pageSize") or DEFAULT_PAGE)
        except (TypeError, ValueError):
            raise ApiError(400, "Invalid value for page_size", "badRequest") from None
        if size < 0 or size > MAX_PAGE:
            raise ApiError(400, f"page_size must be between 0 and {MAX_PAGE}", "badRequest")
        size = size or DEFAULT_PAGE
        order = " ".join(str(body.get("orderBy") or "timestamp asc").split()).lower()
        if order not in ("timestamp asc", "timestamp desc", "timestamp"):
            raise ApiError(400, f"Invalid orderBy: {body.get('orderBy')}", "badRequest")
        descending = order == "timestamp desc"
        try:
            keep = compile_filter(str(body.get("filter") or ""))
        except QueryError as error:
            raise ApiError(400, f"Invalid filter: {error}", "badRequest") from None
        token = str(body.get("pageToken") or "")
        after = _after_token(token, descending) if token else (lambda entry: True)
        matched = sorted(
            (e for e in self.store.entries if keep(e) and after(e)), key=_sort_key, reverse=descending
        )
        page = matched[:size]
        answer: dict[str, Any] = {"entries": page} if page else {}
        if len(matched) > size:
            answer["nextPageToken"] = _token(page[-1])
        return json_response(answer)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v2/entries:list", self.list_entries)
