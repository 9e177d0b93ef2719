"""Artifact Registry's REST surface (``artifactregistry`` v1) on the shared emulator server.

``POST/GET /v1/projects/P/locations/L/repositories`` (create with ``repositoryId``: a done
long-running operation whose response is the repository; list), ``GET .../repositories/R``, and
``GET .../repositories/R/dockerImages`` (what ``gcloud artifacts docker images list`` reads).
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.artifactregistry.registry import Registry, Repository, valid_repository_id
from gcptui.remote.emulator.core.errors import ApiError, json_response

_BASE = "/v1/projects/{project}/locations/{location}/repositories"
DEFAULT_PAGE = 100


def _page(request: web.Request, items: list[dict[str, Any]], key: str) -> dict[str, Any]:
    try:
        size = int(request.query.get("pageSize") or DEFAULT_PAGE)
        token = request.query.get("pageToken") or ""
        start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
    except ValueError:
        raise ApiError(400, "Invalid page token or page size.", "badRequest") from None
    size = min(max(size, 1), 1000)
    answer: dict[str, Any] = {key: items[start : start + size]} if items[start : start + size] else {}
    if start + size < len(items):
        answer["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
    return answer


class ArtifactRegistryApi:
    """Routes for Docker repositories and their images; ``regions`` the project may use."""

    def __init__(self, registry: Registry, regions: set[str]) -> None:
        self.registry = registry
        self.regions = regions

    def _location(self, request: web.Request) -> str:
        project, location = request.match_info["project"], request.match_info["location"]
        if project not in (self.registry.project, self.registry.number):
            raise ApiError(403, f"Permission denied on resource project {project}.", "forbidden")
        if location not in self.regions:
            raise ApiError(400, f"Invalid location: {location}", "badRequest")
        return location

    def _json(self, repository: Repository) -> dict[str, Any]:
        stamp = repository.created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body: dict[str, Any] = {
            "name": f"projects/{self.registry.project}/locations/{repository.location}/repositories/{repository.id}",
            "format": "DOCKER",
            "mode": "STANDARD_REPOSITORY",
            "createTime": stamp,
            "updateTime": stamp,
            "registryUri": f"{repository.location}-docker.pkg.dev/{self.registry.project}/{repository.id}",
        }
        for key in ("description", "labels"):
            if repository.body.get(key):
                body[key] = repository.body[key]
        return body

    async def create(self, request: web.Request) -> web.Response:
        location = self._location(request)
        repository_id = request.query.get("repositoryId", "")
        if not valid_repository_id(repository_id):
            raise ApiError(400, f"Invalid repository id {repository_id!r}: lowercase letters, digits and "
                           "hyphens, a letter first.", "badRequest")  # fmt: skip
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "Invalid JSON payload received.", "badRequest") from None
        if not isinstance(body, dict) or body.get("format") != "DOCKER":
            raise ApiError(400, "The emulator serves Docker repositories: set format DOCKER.", "badRequest")
        repository = self.registry.create(location, repository_id, body)
        name = f"projects/{self.registry.project}/locations/{location}"
        operation = {
            "name": f"{name}/operations/{repository_id}-{int(repository.created.timestamp())}",
            "done": True,
            "response": {"@type": "type.googleapis.com/google.devtools.artifactregistry.v1.Repository",
                         **self._json(repository)},
        }  # fmt: skip
        return json_response(operation)

    async def get(self, request: web.Request) -> web.Response:
        location = self._location(request)
        return json_response(self._json(self.registry.get(location, request.match_info["repository"])))

    async def list(self, request: web.Request) -> web.Response:
        location = self._location(request)
        found = sorted((r for r in self.registry.repositories.values() if r.location == location),
                       key=lambda r: r.id)  # fmt: skip
        return json_response(_page(request, [self._json(r) for r in found], "repositories"))

    async def docker_images(self, request: web.Request) -> web.Response:
        location = self._location(request)
        repository = self.registry.get(location, request.match_info["repository"])
        return json_response(_page(request, self.registry.docker_images(repository), "dockerImages"))

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(_BASE, self.create)
        app.router.add_get(_BASE, self.list)
        app.router.add_get(_BASE + "/{repository}", self.get)
        app.router.add_get(_BASE + "/{repository}/dockerImages", self.docker_images)
