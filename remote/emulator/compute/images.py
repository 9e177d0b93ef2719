"""``images.insert`` from a disk, ``images.get`` and global operations (the project metadata's
too, see ``rest_project``), as GCE answers them.

Making an image takes minutes on GCE; here ``Timing.boot_seconds``. An image of a disk in use by a
running instance needs ``forceCreate=true`` (GCE refuses it otherwise, the same 400 as an insert that
names a disk in use).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gcptui.remote.aio import within
from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.compute.inserts import API_ROOT, check_name, own_urls_as_gce, zonal
from gcptui.remote.emulator.compute.state import Operation, new_id, timestamp
from gcptui.remote.emulator.core.errors import ApiError, not_found

# The public image projects gcloud's ``images list`` reads (its constants.PUBLIC_IMAGE_PROJECTS) and
# the families the emulator has images of; the others answer an empty list.
PUBLIC_FAMILIES: dict[str, tuple[str, ...]] = {
    "debian-cloud": ("debian-11", "debian-12"),
    "ubuntu-os-cloud": ("ubuntu-2204-lts", "ubuntu-2404-lts-amd64"),
    "cos-cloud": ("cos-stable",),
    "rocky-linux-cloud": ("rocky-linux-9",),
    "deeplearning-platform-release": ("common-cu124-debian-11",),
    "ubuntu-os-accelerator-images": ("ubuntu-accelerator-2204-amd64-with-nvidia-550",),
}
PUBLIC_IMAGE_DATE = "v20250101"  # each family's one image: FAMILY-v20250101 (inserts.image_url agrees)
PUBLIC_CREATED = "2025-01-01T00:00:00.000-08:00"


def public_project(project: str) -> bool:
    """A project whose images anyone may read (gcloud lists ``*-cloud`` and a few more)."""
    return project in PUBLIC_FAMILIES or project.endswith("-cloud") or project.endswith("-images")


def public_image_json(project: str, family: str) -> dict[str, Any]:
    name = f"{family}-{PUBLIC_IMAGE_DATE}"
    return {
        "kind": "compute#image", "id": str(int(hashlib.sha256(f"{project}/{name}".encode()).hexdigest()[:15], 16)), "creationTimestamp": PUBLIC_CREATED,
        "name": name, "description": f"{family}, built on 2025-01-01", "family": family, "sourceType": "RAW",
        "status": "READY", "diskSizeGb": "10", "archiveSizeBytes": "1000000000", "architecture": "X86_64",
        "selfLink": f"{API_ROOT}/projects/{project}/global/images/{name}",
    }  # fmt: skip


@dataclass(eq=False)
class Image:
    name: str
    source_disk: str  # full URL
    size_gb: int
    status: str = "PENDING"
    id: int = field(default_factory=new_id)
    created: str = field(default_factory=timestamp)


def image_json(image: Image, project: str) -> dict[str, Any]:
    """A project's own image, as ``images.get`` answers it."""
    return {
        "kind": "compute#image", "id": str(image.id), "creationTimestamp": image.created, "name": image.name,
        "sourceType": "RAW", "status": image.status, "sourceDisk": image.source_disk,
        "diskSizeGb": str(image.size_gb), "selfLink": f"{API_ROOT}/projects/{project}/global/images/{image.name}",
    }  # fmt: skip


def operation_json(op: Operation, project: str) -> dict[str, Any]:
    """A global operation (no zone)."""
    body: dict[str, Any] = {
        "kind": "compute#operation", "id": str(op.id), "name": op.name, "operationType": op.operation_type,
        "targetLink": f"{API_ROOT}/projects/{project}" + (
            "" if op.operation_type.startswith("compute.projects.") else f"/global/images/{op.target}"
        ),
        "targetId": str(op.target_id),
        "status": op.status, "user": op.user, "progress": op.progress, "insertTime": op.insert_time,
        "selfLink": f"{API_ROOT}/projects/{project}/global/operations/{op.name}",
    }  # fmt: skip
    if op.start_time:
        body["startTime"] = op.start_time
    if op.end_time:
        body["endTime"] = op.end_time
    return body


class ImagesApi:
    def __init__(self, fleet: Fleet, max_wait_seconds: float = 30.0) -> None:
        self.fleet = fleet
        self.images: dict[str, Image] = {}
        self.operations: dict[str, Operation] = {}
        self.max_wait_seconds = max_wait_seconds
        self._tasks: set[asyncio.Task[None]] = set()

    def state(self, name: str) -> tuple[str, int] | None:
        """(status, size in GB) of image ``name``, None when the project has none of that name."""
        image = self.images.get(name)
        return (image.status, image.size_gb) if image is not None else None

    def _json(self, body: dict[str, Any]) -> web.Response:
        return web.Response(text=json.dumps(body), content_type="application/json")

    async def insert(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        project = self.fleet.project
        body = own_urls_as_gce(body, f"{request.scheme}://{request.host}/compute/v1/")
        name = check_name(body.get("name") if isinstance(body, dict) else None)
        if name in self.images:
            raise ApiError(
                409, f"The resource 'projects/{project}/global/images/{name}' already exists", "alreadyExists"
            )
        source = str(body.get("sourceDisk") or "")
        where = zonal(source, "disks")
        if where is None:
            raise ApiError(
                400,
                f"Invalid value for field 'resource.sourceDisk': '{source}'. The URL is malformed.",
                "invalid",
            )
        disk = self.fleet.disk(*where)
        running = [u for u in disk.users if self.fleet.vms.get((where[0], u)) and self.fleet.vms[(where[0], u)].status == "RUNNING"]  # fmt: skip
        if running and request.query.get("forceCreate", "").lower() != "true":
            raise ApiError(
                400,
                f"The disk resource 'projects/{project}/zones/{where[0]}/disks/{disk.name}' is already being used "
                f"by 'projects/{project}/zones/{where[0]}/instances/{running[0]}'",
                "resourceInUseByAnotherResource",
            )
        image = Image(name, f"{API_ROOT}/projects/{project}/zones/{where[0]}/disks/{disk.name}", disk.size_gb)
        self.images[name] = image
        op = Operation(zone="", operation_type="insert", target=name, target_id=image.id)
        self.operations[op.name] = op
        task = asyncio.get_running_loop().create_task(self._make(image, op))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return self._json(operation_json(op, project))

    async def _make(self, image: Image, op: Operation) -> None:
        op.running()
        await asyncio.sleep(self.fleet.timing.boot_seconds)
        image.status = "READY"
        op.finish()

    async def get_image(self, request: web.Request) -> web.Response:
        project, name = request.match_info["project"], request.match_info["image"]
        if project != self.fleet.project:  # a public image project's
            for family in PUBLIC_FAMILIES.get(project, ()):
                if public_image_json(project, family)["name"] == name:
                    return self._json(public_image_json(project, family))
            raise not_found(f"projects/{project}/global/images/{name}")
        image = self.images.get(name)
        if image is None:
            raise not_found(f"projects/{project}/global/images/{name}")
        return self._json(image_json(image, project))

    def _operation(self, request: web.Request) -> Operation:
        op = self.operations.get(request.match_info["op"])
        if op is None:
            where = f"projects/{self.fleet.project}/global/operations/{request.match_info['op']}"
            raise not_found(where)
        return op

    async def get_operation(self, request: web.Request) -> web.Response:
        return self._json(operation_json(self._operation(request), self.fleet.project))

    async def wait_operation(self, request: web.Request) -> web.Response:
        op = self._operation(request)
        try:
            await within(self.max_wait_seconds, op.done.wait())
        except TimeoutError:
            pass  # like GCE: the operation as it stands; the caller waits again
        return self._json(operation_json(op, self.fleet.project))


def add_image_routes(app: web.Application, api: ImagesApi, wrap: Any, root: str) -> None:
    """``wrap(method, handler)`` adds the checks every method gets (token, faults, project)."""
    app.router.add_post(root + "/global/images", wrap("images.insert", api.insert))
    app.router.add_get(root + "/global/images/{image}", wrap("images.get", api.get_image))
    app.router.add_get(root + "/global/operations/{op}", wrap("globalOperations.get", api.get_operation))
    app.router.add_post(
        root + "/global/operations/{op}/wait", wrap("globalOperations.wait", api.wait_operation)
    )
