"""Cloud Build's REST surface (``cloudbuild`` v1) on the shared emulator server.

``POST/GET /v1/projects/P/locations/L/builds`` (create: a long-running operation whose metadata holds
the build, as Cloud Build answers; list, newest first) and ``GET .../builds/ID``; the same without
``locations/L`` for the global region (what ``gcloud builds submit`` and ``list`` use by default).
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.cloudbuild.builds import Build, Builds
from gcptui.remote.emulator.core.errors import ApiError, json_response

DEFAULT_PAGE = 100


class CloudBuildApi:
    """Routes for builds; ``regions`` the project may use (and ``global``)."""

    def __init__(self, builds: Builds, regions: set[str]) -> None:
        self.builds = builds
        self.regions = regions | {"global"}

    def _location(self, request: web.Request) -> str:
        project = request.match_info["project"]
        location = request.match_info.get("location", "global")
        if project not in (self.builds.project, self.builds.number):
            raise ApiError(403, f"Permission denied on resource project {project}.", "forbidden")
        if location not in self.regions:
            raise ApiError(400, f"invalid region {location}", "badRequest")
        return location

    async def create(self, request: web.Request) -> web.Response:
        location = self._location(request)
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "Invalid JSON payload received.", "badRequest") from None
        build = self.builds.create(location, body)
        operation = {
            "name": f"projects/{self.builds.number}/locations/{location}/operations/{build.id}",
            "metadata": {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata",
                         "build": self.builds.json(build)},
        }  # fmt: skip
        return json_response(operation)

    async def get(self, request: web.Request) -> web.Response:
        build = self.builds.get(self._location(request), request.match_info["build"])
        return json_response(self.builds.json(build))

    async def list(self, request: web.Request) -> web.Response:
        location = self._location(request)
        if request.query.get("filter"):
            raise ApiError(400, "The emulator's builds.list reads no filter.", "badRequest")
        try:
            size = int(request.query.get("pageSize") or DEFAULT_PAGE)
            token = request.query.get("pageToken") or ""
            start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
        except ValueError:
            raise ApiError(400, "Invalid page token or page size.", "badRequest") from None
        size = min(max(size, 1), 1000)
        found: list[Build] = [b for b in self.builds.builds.values() if b.location == location]
        found.sort(key=lambda b: b.created, reverse=True)
        page = found[start : start + size]
        answer: dict[str, Any] = {"builds": [self.builds.json(b) for b in page]} if page else {}
        if start + size < len(found):
            answer["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return json_response(answer)

    def add_routes(self, app: web.Application) -> None:
        for base in ("/v1/projects/{project}/locations/{location}/builds", "/v1/projects/{project}/builds"):
            app.router.add_post(base, self.create)
            app.router.add_get(base, self.list)
            app.router.add_get(base + "/{build}", self.get)
