"""Google's JSON error shape, shared by every emulated API.

Google's REST APIs answer errors as ``{"error": {"code", "message", "errors": [{"message", "domain",
"reason"}], "status"}}`` (``status`` is the google.rpc.Code name), optionally with ``details``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

# HTTP status -> google.rpc.Code name, as Google's front end maps them.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
    503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}  # fmt: skip


class ApiError(Exception):
    """An HTTP error answer: the server turns it into Google's JSON error shape."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


def not_found(resource: str) -> ApiError:
    """Compute's 404 for a resource path (``projects/P/zones/Z/instances/N``), worded as Google words it."""
    return ApiError(404, f"The resource '{resource}' was not found", "notFound")


def error_body(
    status: int, message: str, reason: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """``{"error": {...}}`` as Google answers it."""
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}],
        "status": STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if details:
        error["details"] = details
    return {"error": error}


def json_response(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def error_response(status: int, message: str, reason: str) -> web.Response:
    return json_response(error_body(status, message, reason), status)
