"""The schema checker as an aiohttp middleware on every emulator the tests start.

``install()`` (tests/conftest.py, once per process) adds it to the emulator's
``core.server.extra_middlewares``, so every ``Emulator`` and ``EmulatorThread`` built afterwards
checks each exchange. Violations are collected here, not raised in the server (an exception there
would be a 500 the product might retry or swallow); the conftest's autouse fixture fails the test
during which they happened, with the method, the JSON path and what the document says.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from aiohttp import web

from gcptui.remote.emulator.core import server
from gcptui.remote.emulator.core.server import Handler
from tests.schema.checker import Exchange, Violation, check, match
from tests.schema.fields import set_paths

# scripts/api_coverage.py sets it: each process appends what it saw to DIR/<pid>.jsonl
RECORD = "GCPTUI_API_RECORD"

_lock = threading.Lock()
_violations: list[Violation] = []
exchanges = 0  # how many the checker saw, for the coverage script and a sanity check


@web.middleware
async def schema_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_body = await request.read() if request.body_exists else b""  # cached: the handler reads it again
    query = list(request.query.items())
    try:
        response = await handler(request)
    except web.HTTPException as raised:  # aiohttp answers these after every middleware: check them here
        body = raised.text.encode() if raised.text else b""
        _collect(request, Exchange(request.method, request.path, query, request_body, raised.status, body))
        raise
    if not isinstance(response, web.Response):
        return response  # a stream (never a Google REST answer)
    body = response.body if isinstance(response.body, bytes) else b""
    _collect(request, Exchange(request.method, request.path, query, request_body, response.status, body))
    return response


def _collect(request: web.Request, exchange: Exchange) -> None:
    global exchanges
    found = check(exchange)
    with _lock:
        exchanges += 1
        _violations.extend(found)
    if os.environ.get(RECORD):
        _record(Path(os.environ[RECORD]), request, exchange)


def _record(folder: Path, request: web.Request, exchange: Exchange) -> None:
    found = match(exchange.verb, exchange.path)
    api, method = found if found else (None, None)
    fields: list[str] = []
    if api and method and method.response and 200 <= exchange.status < 300:
        try:
            body = json.loads(exchange.response_body)
        except ValueError:
            body = None
        fields = sorted(set_paths(api.schema, {"$ref": method.response}, body))
    line = {
        "method": method.id if method else None,
        "status": exchange.status,
        "gcloud": "gcloud" in request.headers.get("User-Agent", ""),
        "fields": fields,
    }
    folder.mkdir(parents=True, exist_ok=True)
    with _lock, (folder / f"{os.getpid()}.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


def install() -> None:
    if schema_middleware not in server.extra_middlewares:
        server.extra_middlewares.append(schema_middleware)


def take() -> list[Violation]:
    """The violations since the last call, and forget them."""
    with _lock:
        found = list(_violations)
        _violations.clear()
    return found
