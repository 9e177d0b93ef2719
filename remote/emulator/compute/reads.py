"""What gcloud and Google's samples read besides instances: machine types, accelerator types and disks
and disk types (each zone's list, one item, the aggregated list), regions, images (a project's list, one image, the newest of
a family, the public image projects' too), and ``instances.setLabels``.

gcloud's ``compute machine-types list``, ``accelerator-types list`` and ``disks list`` call the
aggregated lists; Google's create-a-VM sample calls ``images.getFromFamily`` first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.compute.catalog import (
    ACCELERATORS,
    CREATED,
    accelerator_type_json,
    catalog_id,
    disk_type_json,
    machine_type,
    machine_type_json,
    machine_types,
)
from gcptui.remote.emulator.compute.filters import parse_filter
from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.compute.images import PUBLIC_FAMILIES, ImagesApi, image_json, public_image_json
from gcptui.remote.emulator.compute.inserts import API_ROOT, DISK_TYPES
from gcptui.remote.emulator.compute.resources import disk_json, operation_json, region_of
from gcptui.remote.emulator.compute.state import Operation, new_fingerprint, same_fingerprint
from gcptui.remote.emulator.core.errors import ApiError, json_response, not_found

_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


class ComputeReads:
    """Routes added to the Compute API by ``add``; ``page`` and ``wrap`` are ComputeApi's."""

    def __init__(
        self,
        fleet: Fleet,
        images: ImagesApi,
        page: Callable[[web.Request, list[Any]], tuple[list[Any], str | None]],
    ) -> None:
        self.fleet = fleet
        self.images = images
        self._page = page

    def add(self, app: web.Application, wrap: Callable[[str, Any], Any], root: str) -> None:
        r = app.router
        for kind in ("machineTypes", "acceleratorTypes", "diskTypes", "disks"):
            r.add_get(f"{root}/zones/{{zone}}/{kind}", wrap(f"{kind}.list", self._zonal_list(kind)))
            r.add_get(f"{root}/aggregated/{kind}", wrap(f"{kind}.aggregatedList", self._aggregated(kind)))
        r.add_get(root + "/zones/{zone}/machineTypes/{type}", wrap("machineTypes.get", self.get_machine_type))
        r.add_get(
            root + "/zones/{zone}/acceleratorTypes/{type}",
            wrap("acceleratorTypes.get", self.get_accelerator_type),
        )
        r.add_get(root + "/zones/{zone}/diskTypes/{type}", wrap("diskTypes.get", self.get_disk_type))
        r.add_get(root + "/regions", wrap("regions.list", self.list_regions))
        r.add_get(root + "/regions/{region}", wrap("regions.get", self.get_region))
        r.add_get(root + "/global/images", wrap("images.list", self.list_images))
        r.add_get(
            root + "/global/images/family/{family}", wrap("images.getFromFamily", self.image_from_family)
        )
        r.add_post(
            root + "/zones/{zone}/instances/{name}/setLabels", wrap("instances.setLabels", self.set_labels)
        )

    # -- zonal catalogs and disks ------------------------------------------------------------------------

    def _bodies(self, kind: str, zones: Iterable[str]) -> list[dict[str, Any]]:
        project = self.fleet.project
        out: list[dict[str, Any]] = []
        for zone in zones:
            if kind == "machineTypes":
                out += [machine_type_json(project, zone, m) for m in machine_types()]
            elif kind == "acceleratorTypes":
                out += [accelerator_type_json(project, zone, name) for name in sorted(ACCELERATORS)]
            elif kind == "diskTypes":
                out += [disk_type_json(project, zone, name) for name in sorted(DISK_TYPES)]
            else:
                found = sorted(
                    (d for (z, _), d in self.fleet.disks.items() if z == zone), key=lambda d: d.name
                )
                out += [disk_json(d, project) for d in found]
        return out

    def _filtered(self, request: web.Request, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keep = parse_filter(request.query.get("filter", ""))
        return [body for body in bodies if keep(body)]

    def _zonal_list(self, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            zone = request.match_info["zone"]
            page, token = self._page(request, self._filtered(request, self._bodies(kind, [zone])))
            project = self.fleet.project
            body: dict[str, Any] = {
                "kind": f"compute#{kind[:-1]}List" if kind != "disks" else "compute#diskList",
                "id": f"projects/{project}/zones/{zone}/{kind}",
                "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/{kind}",
            }
            if page:
                body["items"] = page
            if token:
                body["nextPageToken"] = token
            return json_response(body)

        return handle

    def _aggregated(self, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            zones = list(self.fleet.zones)
            page, token = self._page(request, self._filtered(request, self._bodies(kind, zones)))
            items: dict[str, dict[str, Any]] = {
                f"zones/{zone}": {"warning": _no_results(f"zones/{zone}")} for zone in zones
            }
            for body in page:
                scoped = items[f"zones/{body['zone'].rsplit('/', 1)[-1]}"]
                scoped.pop("warning", None)
                scoped.setdefault(kind, []).append(body)
            singular = kind[:-1]  # machineTypes -> machineType, disks -> disk
            out: dict[str, Any] = {
                "kind": f"compute#{singular}AggregatedList",
                "id": f"projects/{self.fleet.project}/aggregated/{kind}",
                "items": items,
                "selfLink": f"{API_ROOT}/projects/{self.fleet.project}/aggregated/{kind}",
            }
            if token:
                out["nextPageToken"] = token
            return json_response(out)

        return handle

    async def get_machine_type(self, request: web.Request) -> web.Response:
        zone, name = request.match_info["zone"], request.match_info["type"]
        found = machine_type(name)
        if found is None:
            raise not_found(f"projects/{self.fleet.project}/zones/{zone}/machineTypes/{name}")
        return json_response(machine_type_json(self.fleet.project, zone, found))

    async def get_accelerator_type(self, request: web.Request) -> web.Response:
        zone, name = request.match_info["zone"], request.match_info["type"]
        if name not in ACCELERATORS:
            raise not_found(f"projects/{self.fleet.project}/zones/{zone}/acceleratorTypes/{name}")
        return json_response(accelerator_type_json(self.fleet.project, zone, name))

    async def get_disk_type(self, request: web.Request) -> web.Response:
        zone, name = request.match_info["zone"], request.match_info["type"]
        if name not in DISK_TYPES:
            raise not_found(f"projects/{self.fleet.project}/zones/{zone}/diskTypes/{name}")
        return json_response(disk_type_json(self.fleet.project, zone, name))

    def _regions(self) -> dict[str, list[str]]:
        regions: dict[str, list[str]] = {}
        for zone in self.fleet.zones:
            regions.setdefault(region_of(zone), []).append(zone)
        return regions

    def _region_json(self, name: str, zones: list[str]) -> dict[str, Any]:
        base = f"{API_ROOT}/projects/{self.fleet.project}"
        return {
            "kind": "compute#region", "id": catalog_id("regions", name), "creationTimestamp": CREATED,
            "name": name, "description": name, "status": "UP", "zones": [f"{base}/zones/{z}" for z in sorted(zones)],
            "selfLink": f"{base}/regions/{name}",
        }  # fmt: skip

    async def list_regions(self, request: web.Request) -> web.Response:
        bodies = [self._region_json(name, zones) for name, zones in sorted(self._regions().items())]
        page, token = self._page(request, self._filtered(request, bodies))
        base = f"{API_ROOT}/projects/{self.fleet.project}"
        body: dict[str, Any] = {"kind": "compute#regionList", "id": f"projects/{self.fleet.project}/regions",
                                "selfLink": f"{base}/regions"}  # fmt: skip
        if page:
            body["items"] = page
        if token:
            body["nextPageToken"] = token
        return json_response(body)

    async def get_region(self, request: web.Request) -> web.Response:
        name = request.match_info["region"]
        zones = self._regions().get(name)
        if zones is None:
            raise not_found(f"projects/{self.fleet.project}/regions/{name}")
        return json_response(self._region_json(name, zones))

    # -- images ------------------------------------------------------------------------------------------

    def _image_bodies(self, project: str) -> list[dict[str, Any]]:
        if project == self.fleet.project:
            return [
                image_json(image, project)
                for image in sorted(self.images.images.values(), key=lambda i: i.name)
            ]
        return [public_image_json(project, family) for family in PUBLIC_FAMILIES.get(project, ())]

    async def list_images(self, request: web.Request) -> web.Response:
        project = request.match_info["project"]
        page, token = self._page(request, self._filtered(request, self._image_bodies(project)))
        body: dict[str, Any] = {
            "kind": "compute#imageList",
            "id": f"projects/{project}/global/images",
            "selfLink": f"{API_ROOT}/projects/{project}/global/images",
        }
        if page:
            body["items"] = page
        if token:
            body["nextPageToken"] = token
        return json_response(body)

    async def image_from_family(self, request: web.Request) -> web.Response:
        project, family = request.match_info["project"], request.match_info["family"]
        found = [
            b for b in self._image_bodies(project) if b.get("family") == family and b["status"] == "READY"
        ]
        if not found:
            raise not_found(f"projects/{project}/global/images/family/{family}")
        return json_response(max(found, key=lambda b: b["creationTimestamp"]))

    # -- labels ------------------------------------------------------------------------------------------

    async def set_labels(self, request: web.Request) -> web.Response:
        vm = self.fleet.find(request.match_info["zone"], request.match_info["name"])
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        labels = body.get("labels") or {} if isinstance(body, dict) else None
        if not isinstance(labels, dict):
            raise ApiError(400, "Invalid JSON payload received.", "parseError")
        for key, value in labels.items():
            if (
                not _LABEL_KEY.fullmatch(str(key))
                or not isinstance(value, str)
                or not _LABEL_VALUE.fullmatch(value)
            ):
                raise ApiError(
                    400, f"Invalid value for field 'labels': '{key}'. Label keys and values must be lowercase "
                    "letters, digits, '_' or '-' (keys start with a letter).", "invalid",
                )  # fmt: skip
        if not same_fingerprint(body.get("labelFingerprint"), vm.label_fingerprint):
            raise ApiError(
                412, "Labels fingerprint either invalid or resource labels have changed", "conditionNotMet"
            )
        vm.labels = dict(labels)
        vm.label_fingerprint = new_fingerprint()
        op = self.fleet._record(
            Operation(zone=vm.zone, operation_type="setLabels", target=vm.name, target_id=vm.id)
        )
        op.finish()
        return json_response(operation_json(op, self.fleet.project))


def _no_results(scope: str) -> dict[str, Any]:
    return {
        "code": "NO_RESULTS_ON_PAGE",
        "message": "There are no results for scope '" + scope + "' on this page.",
        "data": [{"key": "scope", "value": scope}],
    }
