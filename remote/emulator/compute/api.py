"""The Compute API's REST surface, as far as gcptui uses it, mounted on the emulator's server.

Paths, query parameters and JSON shapes follow what google-cloud-compute's REST transport sends and
parses (see its ``services/*/transports/rest_base.py``).
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from gcptui.remote.aio import within
from gcptui.remote.emulator.compute.filters import FilterError, parse_filter
from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.compute.images import ImagesApi, add_image_routes, public_project
from gcptui.remote.emulator.compute.images import operation_json as global_operation_json
from gcptui.remote.emulator.compute.inserts import own_urls_as_gce, vm_from_insert
from gcptui.remote.emulator.compute.instance_metadata import metadata_handler
from gcptui.remote.emulator.compute.project import ProjectApi, add_routes
from gcptui.remote.emulator.compute.reads import ComputeReads
from gcptui.remote.emulator.compute.resources import (
    disk_json,
    guest_attributes_json,
    instance_json,
    operation_json,
    zone_url,
)
from gcptui.remote.emulator.compute.state import NAME_PATTERN, valid_name
from gcptui.remote.emulator.core.errors import ApiError, json_response, not_found
from gcptui.remote.emulator.core.server import Handler

V1 = "/compute/v1/projects/{project}"
MAX_WAIT_SECONDS = 30.0  # GCE's operations.wait returns after at most 2 minutes; ours sooner


_json = json_response
# Methods any project may call on a public image project (debian-cloud, ...).
_PUBLIC_READS = {"images.get", "images.list", "images.getFromFamily"}
# Path parameters GCE checks against its name rule (an instance also by numeric id).
_PATH_NAMES = {"name": "instance", "disk": "disk"}


class ComputeApi:
    """The Compute API's routes for one emulated project, on the emulator's application."""

    def __init__(self, app: web.Application, fleet: Fleet, page_size: int = 500) -> None:
        self.fleet = fleet
        self.app = app
        self.max_wait_seconds = MAX_WAIT_SECONDS  # 0: operations.wait answers at once, as GCE may
        self.page_size = page_size
        self.calls: dict[str, int] = {}  # method -> count, for tests asserting "one aggregated call"
        route = self.app.router
        route.add_get(
            V1 + "/aggregated/instances", self._method("instances.aggregatedList", self.aggregated_instances)
        )
        route.add_get(V1 + "/zones/{zone}/instances", self._method("instances.list", self.list_instances))
        route.add_post(V1 + "/zones/{zone}/instances", self._method("instances.insert", self.insert))
        route.add_get(V1 + "/zones/{zone}/instances/{name}", self._method("instances.get", self.get_instance))
        route.add_delete(
            V1 + "/zones/{zone}/instances/{name}", self._method("instances.delete", self.lifecycle("delete"))
        )
        for verb in ("start", "stop", "reset", "simulateMaintenanceEvent"):
            route.add_post(
                V1 + "/zones/{zone}/instances/{name}/" + verb,
                self._method(f"instances.{verb}", self.lifecycle(verb)),
            )
        route.add_post(  # instance metadata (its own ssh-keys among it): instance_metadata.py
            V1 + "/zones/{zone}/instances/{name}/setMetadata",
            self._method("instances.setMetadata", metadata_handler(fleet)),
        )
        route.add_get(
            V1 + "/zones/{zone}/operations", self._method("zoneOperations.list", self.list_operations)
        )
        route.add_get(
            V1 + "/zones/{zone}/operations/{op}", self._method("zoneOperations.get", self.get_operation)
        )
        route.add_post(
            V1 + "/zones/{zone}/operations/{op}/wait",
            self._method("zoneOperations.wait", self.wait_operation),
        )
        route.add_get(
            V1 + "/aggregated/operations",
            self._method("globalOperations.aggregatedList", self.aggregated_operations),
        )
        route.add_get(V1 + "/zones/{zone}/disks/{disk}", self._method("disks.get", self.get_disk))
        # One registry of global operations: images' and the project metadata's.
        self.images = ImagesApi(fleet)
        add_image_routes(self.app, self.images, self._method, V1)
        ComputeReads(fleet, self.images, self._page).add(self.app, self._method, V1)
        self.project_api = ProjectApi(fleet, self.images.operations)
        add_routes(self.app, self.project_api, self._method, V1)
        route.add_get(
            V1 + "/zones/{zone}/instances/{name}/getGuestAttributes",
            self._method("instances.getGuestAttributes", self.guest_attributes),
        )

    # -- plumbing --------------------------------------------------------------------------------------

    def _method(self, method: str, handler: Handler) -> Handler:
        async def call(request: web.Request) -> web.StreamResponse:
            self.calls[method] = self.calls.get(method, 0) + 1
            fault = self.fleet.faults.take(method)
            if fault is not None:
                return _json(fault.body(self.fleet.project), fault.status)
            project = request.match_info["project"]
            if project != self.fleet.project and not (method in _PUBLIC_READS and public_project(project)):
                raise not_found(f"projects/{project}")
            for key, field in _PATH_NAMES.items():
                value = request.match_info.get(key)
                if value is not None and not valid_name(value):
                    raise ApiError(
                        400,
                        f"Invalid value for field '{field}': '{value}'. Must be a match of regex "
                        f"'{NAME_PATTERN}|[1-9][0-9]{{0,19}}'",
                        "invalid",
                    )
            zone = request.match_info.get("zone")
            if zone is not None and zone not in self.fleet.zones:
                raise not_found(f"projects/{project}/zones/{zone}")
            try:
                return await handler(request)
            except FilterError as err:
                raise ApiError(400, str(err), "invalid") from None

        return call

    def _page(self, request: web.Request, items: list[Any]) -> tuple[list[Any], str | None]:
        """One page of ``items`` by ``maxResults``/``pageToken``, and the next token if more remain."""
        try:
            size = min(int(request.query.get("maxResults") or self.page_size), self.page_size)
            token = request.query.get("pageToken") or ""
            offset = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
        except ValueError:
            raise ApiError(400, "Invalid value for field 'pageToken' or 'maxResults'.", "invalid") from None
        size = max(size, 1)
        end = offset + size
        next_token = base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(items) else None
        return items[offset:end], next_token

    # -- instances -------------------------------------------------------------------------------------

    def _instances(self, request: web.Request, zone: str | None) -> list[dict[str, Any]]:
        keep = parse_filter(request.query.get("filter", ""))
        vms = sorted(
            (vm for vm in self.fleet.vms.values() if zone is None or vm.zone == zone), key=lambda v: v.key
        )
        bodies = (self._instance_json(vm) for vm in vms)
        return [body for body in bodies if keep(body)]

    async def list_instances(self, request: web.Request) -> web.Response:
        zone = request.match_info["zone"]
        if zone in self.fleet.faults.unreachable:  # what the aggregated list calls UNREACHABLE
            raise ApiError(503, "The service is currently unavailable.", "backendError")
        page, token = self._page(request, self._instances(request, zone))
        project = self.fleet.project
        body: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{project}/zones/{zone}/instances",
            "items": page,
            "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances",
        }
        if not page:
            del body["items"]
            body["warning"] = _no_results(f"zones/{zone}")
        if token:
            body["nextPageToken"] = token
        return _json(body)

    async def aggregated_instances(self, request: web.Request) -> web.Response:
        page, token = self._page(request, self._instances(request, None))
        items: dict[str, dict[str, Any]] = {
            f"zones/{zone}": {"warning": _no_results(f"zones/{zone}")} for zone in self.fleet.zones
        }
        unreachable = self.fleet.faults.unreachable
        for body in page:
            zone = body["zone"].rsplit("/", 1)[-1]
            if zone in unreachable:
                continue
            scoped = items[f"zones/{zone}"]
            scoped.pop("warning", None)
            scoped.setdefault("instances", []).append(body)
        for zone in unreachable:
            items[f"zones/{zone}"] = {
                "warning": {
                    "code": "UNREACHABLE",
                    "message": f"Scope 'zones/{zone}' is unreachable.",
                    "data": [{"key": "scope", "value": f"zones/{zone}"}],
                }
            }
        out: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.fleet.project}/aggregated/instances",
            "items": items,
        }
        if token:
            out["nextPageToken"] = token
        return _json(out)

    async def get_instance(self, request: web.Request) -> web.Response:
        vm = self.fleet.find(request.match_info["zone"], request.match_info["name"])
        return _json(self._instance_json(vm))

    def _instance_json(self, vm: Any) -> dict[str, Any]:
        disks = {name: disk for (zone, name), disk in self.fleet.disks.items() if zone == vm.zone}
        return instance_json(vm, self.fleet.project, disks)

    async def insert(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        zone = request.match_info["zone"]
        body = own_urls_as_gce(body, f"{request.scheme}://{request.host}/compute/v1/")
        name = body.get("name") if isinstance(body, dict) else None
        if isinstance(name, str) and (zone, name) in self.fleet.vms:
            # GCE names the instance, not the boot disk of the same name that exists with it.
            raise ApiError(
                409, f"The resource 'projects/{self.fleet.project}/zones/{zone}/instances/{name}' already exists",
                "alreadyExists",
            )  # fmt: skip
        try:
            vm, disks = vm_from_insert(
                body, zone, self.fleet.project, lambda name: self.fleet.disks.get((zone, name)),
                self.images.state,
            )  # fmt: skip
        except (AttributeError, TypeError, ValueError):
            # A field of the wrong JSON type (a string for an object, a word for a count): GCE refuses
            # it while parsing the body, with a 400, never a 500.
            raise ApiError(400, "Invalid JSON payload received.", "parseError") from None
        op = self.fleet.insert(vm, disks)
        return _json(operation_json(op, self.fleet.project))

    async def get_disk(self, request: web.Request) -> web.Response:
        disk = self.fleet.disk(request.match_info["zone"], request.match_info["disk"])
        return _json(disk_json(disk, self.fleet.project))

    async def guest_attributes(self, request: web.Request) -> web.Response:
        """Guest attributes: the guest agent publishes ``hostkeys/`` once booted, when they are enabled."""
        vm = self.fleet.find(request.match_info["zone"], request.match_info["name"])
        path = request.query.get("queryPath", "")
        enabled = (vm.metadata.get("enable-guest-attributes") or self.fleet.project_metadata.get(
            "enable-guest-attributes", "")).upper() == "TRUE"  # fmt: skip
        entries = (
            [("hostkeys", algorithm, key) for algorithm, key in self.fleet.host.host_keys(vm)]
            if enabled
            else []
        )
        namespace, _, key = path.partition("/")
        chosen = [e for e in entries if e[0] == namespace and (not key or e[1] == key)] if path else entries
        if not chosen:
            where = f"{zone_url(self.fleet.project, vm.zone)}/instances/{vm.name}/guestAttributes/{path}"
            raise not_found(where)
        return _json(guest_attributes_json(vm, self.fleet.project, path, chosen))

    def lifecycle(self, verb: str) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            vm = self.fleet.find(request.match_info["zone"], request.match_info["name"])
            action = {
                "start": self.fleet.start,
                "stop": self.fleet.stop,
                "reset": self.fleet.reset,
                "delete": self.fleet.delete,
                "simulateMaintenanceEvent": self.fleet.simulate_maintenance_event,
            }[verb]
            return _json(operation_json(action(vm), self.fleet.project))

        return handle

    # -- operations ------------------------------------------------------------------------------------

    async def get_operation(self, request: web.Request) -> web.Response:
        op = self.fleet.operation(request.match_info["zone"], request.match_info["op"])
        return _json(operation_json(op, self.fleet.project))

    async def wait_operation(self, request: web.Request) -> web.Response:
        op = self.fleet.operation(request.match_info["zone"], request.match_info["op"])
        try:
            await within(self.max_wait_seconds, op.done.wait())
        except TimeoutError:
            pass  # like GCE: answer with the operation as it stands; the caller waits again
        return _json(operation_json(op, self.fleet.project))

    def _operations(self, request: web.Request, zone: str | None) -> list[dict[str, Any]]:
        keep = parse_filter(request.query.get("filter", ""))
        zones = [zone] if zone else sorted(self.fleet.operations)
        bodies = (
            operation_json(op, self.fleet.project) for z in zones for op in self.fleet.listed_operations(z)
        )
        return [body for body in bodies if keep(body)]

    async def list_operations(self, request: web.Request) -> web.Response:
        zone = request.match_info["zone"]
        page, token = self._page(request, self._operations(request, zone))
        body: dict[str, Any] = {
            "kind": "compute#operationList",
            "id": f"projects/{self.fleet.project}/zones/{zone}/operations",
        }
        if page:
            body["items"] = page
        else:
            body["warning"] = _no_results(f"zones/{zone}")
        if token:
            body["nextPageToken"] = token
        return _json(body)

    async def aggregated_operations(self, request: web.Request) -> web.Response:
        page, token = self._page(request, self._operations(request, None))
        items: dict[str, dict[str, Any]] = {
            f"zones/{zone}": {"warning": _no_results(f"zones/{zone}")} for zone in self.fleet.zones
        }
        keep = parse_filter(request.query.get("filter", ""))
        bodies = (global_operation_json(op, self.fleet.project) for op in self.images.operations.values())
        global_ops = [body for body in bodies if keep(body)]
        items["global"] = {"operations": global_ops} if global_ops else {"warning": _no_results("global")}
        for body in page:
            scoped = items.setdefault(f"zones/{body['zone'].rsplit('/', 1)[-1]}", {})
            scoped.pop("warning", None)
            scoped.setdefault("operations", []).append(body)
        out: dict[str, Any] = {
            "kind": "compute#operationAggregatedList",
            "id": f"projects/{self.fleet.project}/aggregated/operations",
            "items": items,
        }
        if token:
            out["nextPageToken"] = token
        return _json(out)


def _no_results(scope: str) -> dict[str, Any]:
    return {
        "code": "NO_RESULTS_ON_PAGE",
        "message": "There are no results for scope '" + scope + "' on this page.",
        "data": [{"key": "scope", "value": scope}],
    }
