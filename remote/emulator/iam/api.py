"""IAM's service accounts: ``POST /v1/projects/{project}/serviceAccounts`` (create, 409 when the
account id is taken), ``GET`` and ``DELETE /v1/projects/{project}/serviceAccounts/{email}`` (``-`` for
the project, as Google accepts), in ``iam.googleapis.com``'s shapes. Roles are not modelled: the
emulator's token may do everything."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.errors import ApiError, json_response

ACCOUNT_ID = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@dataclass
class ServiceAccounts:
    """The project's service accounts, by e-mail address."""

    project: str
    number: str

    def __post_init__(self) -> None:
        self.accounts: dict[str, dict[str, Any]] = {}

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/projects/{project}/serviceAccounts", self.create)
        app.router.add_get("/v1/projects/{project}/serviceAccounts/{account}", self.get)
        app.router.add_delete("/v1/projects/{project}/serviceAccounts/{account}", self.delete)

    def _project(self, request: web.Request, *, wildcard: bool) -> None:
        project = request.match_info["project"]
        if project != self.project and not (wildcard and project == "-"):
            raise ApiError(404, f"Project {project} not found.", "notFound")

    def _found(self, request: web.Request) -> dict[str, Any]:
        self._project(request, wildcard=True)
        account = request.match_info["account"]
        found = self.accounts.get(account) or next(
            (a for a in self.accounts.values() if a["uniqueId"] == account), None
        )
        if found is None:
            raise ApiError(404, f"Unknown service account: {account}", "notFound")
        return found

    async def create(self, request: web.Request) -> web.Response:
        self._project(request, wildcard=False)
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        account_id = body.get("accountId") if isinstance(body, dict) else None
        if not isinstance(account_id, str) or not (
            6 <= len(account_id) <= 30 and ACCOUNT_ID.fullmatch(account_id)
        ):
            raise ApiError(400, f"Invalid account ID: {str(account_id)[:40]!r}", "badRequest")
        email = f"{account_id}@{self.project}.iam.gserviceaccount.com"
        if email in self.accounts:
            raise ApiError(
                409, f"Service account {account_id} already exists within project projects/{self.project}.",
                "alreadyExists",
            )  # fmt: skip
        given = body.get("serviceAccount") or {}
        unique = str(int(hashlib.sha256(email.encode()).hexdigest()[:15], 16))[:21]
        account: dict[str, Any] = {
            "name": f"projects/{self.project}/serviceAccounts/{email}", "projectId": self.project,
            "uniqueId": unique, "email": email, "etag": "MDEwMjE5MjA=", "oauth2ClientId": unique,
        }  # fmt: skip
        for field in ("displayName", "description"):
            if isinstance(given.get(field), str) and given[field]:
                account[field] = given[field][:256]
        self.accounts[email] = account
        return json_response(account)

    async def get(self, request: web.Request) -> web.Response:
        return json_response(self._found(request))

    async def delete(self, request: web.Request) -> web.Response:
        found = self._found(request)
        del self.accounts[found["email"]]
        return json_response({})
