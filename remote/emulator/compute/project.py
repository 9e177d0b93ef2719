"""The project-wide parts of the Compute API that gcloud needs: ``projects.get`` (with the common
instance metadata) and ``projects.setCommonInstanceMetadata`` (a global operation, with
``globalOperations.get``/``wait``/``list``), ``zones.list``/``zones.get``, and the batch endpoint (``POST /batch/compute/v1``,
multipart/mixed) that gcloud uses for a command naming several instances.

A batch is answered by replaying each inner request against this same server over loopback, with the
caller's own ``Authorization`` header: every inner call is checked and counted like a direct one.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import json
import secrets
from typing import Any

import aiohttp
from aiohttp import web

from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.compute.images import operation_json
from gcptui.remote.emulator.compute.resources import API_ROOT, region_of, zone_url
from gcptui.remote.emulator.compute.state import (
    Operation,
    new_fingerprint,
    new_id,
    same_fingerprint,
    timestamp,
)
from gcptui.remote.emulator.core.errors import ApiError, error_body

MAX_BATCH = 1000  # GCE's limit on calls in one batch request


class ProjectApi:
    """Routes for one emulated project, added to the ``RestApi``'s application."""

    def __init__(self, fleet: Fleet, operations: dict[str, Operation]) -> None:
        self.fleet = fleet
        self.id = new_id()
        self.created = timestamp()
        self.metadata_fingerprint = new_fingerprint()
        self.global_operations = operations  # shared with images.insert's: one global registry

    def project_json(self) -> dict[str, Any]:
        project = self.fleet.project
        items = [{"key": k, "value": v} for k, v in self.fleet.project_metadata.items()]
        metadata: dict[str, Any] = {"kind": "compute#metadata", "fingerprint": self.metadata_fingerprint}
        if items:
            metadata["items"] = items
        return {
            "kind": "compute#project",
            "id": str(self.id),
            "creationTimestamp": self.created,
            "name": project,
            "commonInstanceMetadata": metadata,
            "quotas": [],
            "selfLink": f"{API_ROOT}/projects/{project}",
            "defaultServiceAccount": f"{self.id % 10**12}-compute@developer.gserviceaccount.com",
            "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
            "defaultNetworkTier": "PREMIUM",
        }

    async def set_common_instance_metadata(self, request: web.Request) -> web.Response:
        """Replace the project's metadata; like GCE, only with the current fingerprint (412 otherwise)."""
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        fingerprint = body.get("fingerprint")
        if fingerprint is None:
            raise ApiError(400, "Required field 'fingerprint' not specified", "required")
        if not same_fingerprint(fingerprint, self.metadata_fingerprint):
            raise ApiError(
                412, "Supplied fingerprint does not match current metadata fingerprint.", "conditionNotMet"
            )
        items = body.get("items") or []
        if any(not isinstance(item, dict) or "key" not in item for item in items):
            raise ApiError(
                400, "Invalid value for field 'resource.items': every item needs a key.", "invalid"
            )
        self.fleet.project_metadata.clear()
        self.fleet.project_metadata.update({item["key"]: str(item.get("value", "")) for item in items})
        self.metadata_fingerprint = new_fingerprint()
        op = Operation(zone="", operation_type="compute.projects.setCommonInstanceMetadata", target=self.fleet.project,
                       target_id=self.id)  # fmt: skip
        op.finish()  # metadata is set at once here; GCE's takes seconds (the caller waits either way)
        self.global_operations[op.name] = op
        return web.json_response(operation_json(op, self.fleet.project))

    async def list_global_operations(self, request: web.Request) -> web.Response:
        project = self.fleet.project
        out: dict[str, Any] = {
            "kind": "compute#operationList",
            "id": f"projects/{project}/global/operations",
            "items": [operation_json(op, project) for op in self.global_operations.values()],
            "selfLink": f"{API_ROOT}/projects/{project}/global/operations",
        }
        if not out["items"]:
            del out["items"]
        return web.json_response(out)

    def zone_json(self, zone: str) -> dict[str, Any]:
        project = self.fleet.project
        return {
            "kind": "compute#zone",
            "id": str(abs(hash(zone)) % 10**12),
            "creationTimestamp": self.created,
            "name": zone,
            "description": zone,
            "status": "UP",
            "region": f"{API_ROOT}/projects/{project}/regions/{region_of(zone)}",
            "selfLink": zone_url(project, zone),
            "availableCpuPlatforms": ["Intel Cascade Lake", "AMD Milan"],
            "supportsPzs": False,
        }

    async def get_project(self, request: web.Request) -> web.Response:
        return web.json_response(self.project_json())

    async def list_zones(self, request: web.Request) -> web.Response:
        project = self.fleet.project
        return web.json_response(
            {
                "kind": "compute#zoneList",
                "id": f"projects/{project}/zones",
                "items": [self.zone_json(zone) for zone in self.fleet.zones],
                "selfLink": f"{API_ROOT}/projects/{project}/zones",
            }
        )

    async def get_zone(self, request: web.Request) -> web.Response:
        return web.json_response(self.zone_json(request.match_info["zone"]))

    async def batch(self, request: web.Request) -> web.Response:
        """``multipart/mixed`` in, ``multipart/mixed`` out: one ``application/http`` part per call."""
        kind = request.headers.get("Content-Type", "")
        raw = await request.read()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {kind}\r\n\r\n".encode() + raw
        )
        if not message.is_multipart():
            raise ApiError(400, "Invalid batch request: expected multipart/mixed.", "invalid")
        parts = list(message.iter_parts())
        if len(parts) > MAX_BATCH:
            raise ApiError(400, f"A batch may hold at most {MAX_BATCH} calls.", "invalid")
        base = f"{request.scheme}://{request.host}"
        headers = {"Authorization": request.headers.get("Authorization", "")}
        async with aiohttp.ClientSession() as session:
            answers = await asyncio.gather(*(self._replay(session, base, headers, part) for part in parts))
        boundary = f"batch_{secrets.token_hex(12)}"
        chunks = []
        for part, (status, reason, body) in zip(parts, answers, strict=True):
            content_id = str(part.get("Content-ID", "")).strip("<>")
            chunks.append(
                f"--{boundary}\r\nContent-Type: application/http\r\nContent-ID: <response-{content_id}>\r\n\r\n"
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{body}\r\n"
            )
        chunks.append(f"--{boundary}--\r\n")
        return web.Response(
            body="".join(chunks).encode(), headers={"Content-Type": f"multipart/mixed; boundary={boundary}"}
        )

    async def _replay(
        self, session: aiohttp.ClientSession, base: str, headers: dict[str, str], part: Any
    ) -> tuple[int, str, str]:
        payload = part.get_payload(decode=True) or b""
        head, _, body = payload.replace(b"\r\n", b"\n").partition(b"\n\n")
        lines = head.decode("utf-8", "replace").split("\n")
        try:
            method, target, _version = lines[0].split(" ", 2)
        except ValueError:
            return 400, "Bad Request", json.dumps(error_body(400, "Malformed batch part.", "badRequest"))
        path = target.split("://", 1)[-1]
        path = path[path.index("/") :] if "://" in target else path
        if not path.startswith("/compute/v1/"):
            message = f"{path} is not a Compute API path"
            return 404, "Not Found", json.dumps(error_body(404, message, "notFound"))
        inner = dict(headers)
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-type":
                inner["Content-Type"] = value.strip()
        async with session.request(method, base + path, headers=inner, data=body or None) as response:
            return response.status, response.reason or "", await response.text()


def add_routes(app: web.Application, api: ProjectApi, wrap: Any, root: str) -> None:
    """Register the routes; ``wrap(method_name, handler)`` adds the checks every method gets."""
    app.router.add_get(root, wrap("projects.get", api.get_project))
    app.router.add_post(
        root + "/setCommonInstanceMetadata",
        wrap("projects.setCommonInstanceMetadata", api.set_common_instance_metadata),
    )
    app.router.add_get(root + "/global/operations", wrap("globalOperations.list", api.list_global_operations))
    app.router.add_get(root + "/zones", wrap("zones.list", api.list_zones))
    app.router.add_get(root + "/zones/{zone}", wrap("zones.get", api.get_zone))
    app.router.add_post("/batch/compute/v1", api.batch)
