"""The Cloud TPU API's REST surface (``tpu.googleapis.com`` v2) on the emulator's one endpoint.

Paths are Google's (``/v2/projects/P/locations/ZONE/nodes...``), so ``gcloud compute tpus`` with
``api_endpoint_overrides/tpu`` set to the emulator's root and google-cloud-tpu's REST transport both
reach it. Bodies are proto3 JSON; a field the API does not know is refused as Google refuses it.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.enums import names_for_numbers
from gcptui.remote.emulator.core.errors import ApiError, json_response
from gcptui.remote.emulator.core.names import valid_name
from gcptui.remote.emulator.tpu.nodes import TpuNodes
from gcptui.remote.emulator.tpu.resources import (
    accelerator_type_json,
    accelerator_types_json,
    node_json,
    operation_json,
    queued_json,
    runtime_versions_json,
)
from gcptui.remote.emulator.tpu.state import QueuedResource, TpuNode
from gcptui.remote.emulator.tpu.types import RUNTIME_VERSIONS, TpuType, parse_type, type_from_config

V2 = "/v2/projects/{project}/locations/{zone}"
_ID = "{%s:[^/:]+}"
# Node fields a create may set (the rest of the schema is output only).
_NODE_INPUT = {
    "acceleratorConfig", "acceleratorType", "bootDiskConfig", "cidrBlock", "dataDisks", "description",
    "health", "labels", "metadata", "networkConfig", "networkConfigs", "runtimeVersion",
    "schedulingConfig", "serviceAccount", "shieldedInstanceConfig", "tags",
}  # fmt: skip
_NODE_OUTPUT = {
    "name", "state", "createTime", "id", "apiVersion", "networkEndpoints", "healthDescription",
    "queuedResource", "symptoms", "multisliceNode", "protectionTier", "upcomingMaintenance",
}  # fmt: skip
_MODELLED = {"acceleratorConfig", "acceleratorType", "description", "labels", "metadata", "runtimeVersion",
             "schedulingConfig", "networkConfig", "health", "cidrBlock"}  # fmt: skip
_UPDATABLE = {"metadata", "labels", "description", "tags", "networkConfig", "shieldedInstanceConfig"}
DEFAULT_PAGE_SIZE = 100
# A node's enum fields a client may send as numbers (google-cloud-tpu does: enum-encoding=int).
_NODE_ENUMS = {
    "acceleratorConfig.type": ("google.cloud.tpu.v2.AcceleratorConfig.Type",
                               {0: "TYPE_UNSPECIFIED", 2: "V2", 4: "V3", 7: "V4", 9: "V5LITE_POD", 10: "V5P", 11: "V6E"}),
    "dataDisks[].mode": ("google.cloud.tpu.v2.AttachedDisk.DiskMode",
                         {0: "DISK_MODE_UNSPECIFIED", 1: "READ_WRITE", 2: "READ_ONLY"}),
    "health": ("google.cloud.tpu.v2.Node.Health", {0: "HEALTH_UNSPECIFIED", 1: "HEALTHY", 3: "TIMEOUT",
                                                   4: "UNHEALTHY_TENSORFLOW", 5: "UNHEALTHY_MAINTENANCE"}),
}  # fmt: skip
_QUEUED_ENUMS = {f"tpu.nodeSpec[].node.{path}": enum for path, enum in _NODE_ENUMS.items()}


def _unknown_field(name: str, where: str) -> ApiError:
    return ApiError(
        400,
        f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field.",
        "badRequest",
    )


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.text() or "{}")
    except ValueError as err:
        raise ApiError(400, f"Invalid JSON payload received. {err}", "badRequest") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid JSON payload received. Expected an object.", "badRequest")
    return body


def _page(request: web.Request, items: list[dict[str, Any]], key: str) -> web.Response:
    try:
        size = int(request.query.get("pageSize") or DEFAULT_PAGE_SIZE)
        start = int(request.query.get("pageToken") or 0)
    except ValueError:
        raise ApiError(400, "Invalid pageSize or pageToken.", "badRequest") from None
    size = max(1, min(size, 1000))
    chunk = items[start : start + size]
    body: dict[str, Any] = {key: chunk} if chunk else {}
    if start + size < len(items):
        body["nextPageToken"] = str(start + size)
    return json_response(body)


class TpuApi:
    """The TPU API's routes for one emulated project."""

    def __init__(self, app: web.Application, nodes: TpuNodes, zones: list[str]) -> None:
        self.nodes = nodes
        self.zones = zones
        self.calls: dict[str, int] = {}
        r = app.router
        r.add_get("/v2/projects/{project}/locations", self._method("locations.list", self.list_locations))
        r.add_get(V2, self._method("locations.get", self.get_location))
        node = V2 + "/nodes/" + _ID % "node"
        r.add_get(V2 + "/nodes", self._method("nodes.list", self.list_nodes))
        r.add_post(V2 + "/nodes", self._method("nodes.create", self.create_node))
        r.add_get(node, self._method("nodes.get", self.get_node))
        r.add_delete(node, self._method("nodes.delete", self.delete_node))
        r.add_patch(node, self._method("nodes.patch", self.patch_node))
        r.add_post(node + ":start", self._method("nodes.start", self.start_node))
        r.add_post(node + ":stop", self._method("nodes.stop", self.stop_node))
        r.add_post(
            node + ":getGuestAttributes", self._method("nodes.getGuestAttributes", self.guest_attributes)
        )
        r.add_get(V2 + "/operations", self._method("operations.list", self.list_operations))
        r.add_get(V2 + "/operations/" + _ID % "op", self._method("operations.get", self.get_operation))
        r.add_get(V2 + "/acceleratorTypes", self._method("acceleratorTypes.list", self.list_types))
        r.add_get(
            V2 + "/acceleratorTypes/" + _ID % "type", self._method("acceleratorTypes.get", self.get_type)
        )
        r.add_get(V2 + "/runtimeVersions", self._method("runtimeVersions.list", self.list_versions))
        r.add_get(V2 + "/runtimeVersions/" + _ID % "v", self._method("runtimeVersions.get", self.get_version))
        queued = V2 + "/queuedResources"
        r.add_get(queued, self._method("queuedResources.list", self.list_queued))
        r.add_post(queued, self._method("queuedResources.create", self.create_queued))
        r.add_get(queued + "/" + _ID % "qr", self._method("queuedResources.get", self.get_queued))
        r.add_delete(queued + "/" + _ID % "qr", self._method("queuedResources.delete", self.delete_queued))

    def _method(self, name: str, handler: Any) -> Any:
        async def counted(request: web.Request) -> web.StreamResponse:
            self.calls[name] = self.calls.get(name, 0) + 1
            fault = self.nodes.faults.take(name)  # a queued error burst (fault_control.py)
            if fault is not None:
                return json_response(fault.body(self.nodes.project), fault.status)
            project = request.match_info["project"]
            if project != self.nodes.project:
                raise ApiError(403, f"Permission 'tpu.{name}' denied on 'projects/{project}'", "forbidden")
            zone = request.match_info.get("zone", "-")
            if zone not in self.zones and zone != "-":
                raise ApiError(400, f"Location {zone} is not a valid zone for TPUs.", "badRequest")
            return await handler(request, zone)

        return counted

    @property
    def project(self) -> str:
        return self.nodes.project

    # -- nodes -----------------------------------------------------------------------------------------

    async def list_nodes(self, request: web.Request, zone: str) -> web.Response:
        found = sorted(
            (n for n in self.nodes.nodes.values() if zone == "-" or n.zone == zone),
            key=lambda n: (n.zone, n.name),
        )
        return _page(request, [node_json(self.project, n) for n in found], "nodes")

    async def get_node(self, request: web.Request, zone: str) -> web.Response:
        return json_response(node_json(self.project, self.nodes.find(zone, request.match_info["node"])))

    async def create_node(self, request: web.Request, zone: str) -> web.Response:
        node_id = request.query.get("nodeId", "")
        body = await _body(request)
        names_for_numbers(body, _NODE_ENUMS, "node")
        node = self._node_from(body, node_id, zone)
        if node.key in self.nodes.nodes:
            raise ApiError(409, f"{self.nodes.node_name(node)} already exists", "alreadyExists")
        return json_response(operation_json(self.project, self.nodes.create(node)))

    def _node_from(self, body: dict[str, Any], node_id: str, zone: str, where: str = "node") -> TpuNode:
        for key in body:
            if key in _NODE_OUTPUT:
                continue  # output-only fields are ignored on input, as Google does
            if key not in _NODE_INPUT:
                raise _unknown_field(key, where)
        if not valid_name(node_id):
            raise ApiError(
                400, f"Invalid node ID '{node_id}': it must match [a-z]([-a-z0-9]*[a-z0-9])?.", "badRequest"
            )
        tpu = self._type_of(body)
        version = body.get("runtimeVersion")
        if not isinstance(version, str) or not version:
            raise ApiError(400, "Field runtimeVersion is required.", "badRequest")
        if version not in RUNTIME_VERSIONS:
            raise ApiError(400, f"Runtime version {version} is not supported in {zone}.", "badRequest")
        scheduling = body.get("schedulingConfig") or {}
        if not isinstance(scheduling, dict) or set(scheduling) - {"preemptible", "spot", "reserved"}:
            raise _unknown_field(next(iter(set(scheduling) - {"preemptible", "spot", "reserved"}), "?"),
                                 f"{where}.scheduling_config")  # fmt: skip
        if scheduling.get("spot") and scheduling.get("preemptible"):
            raise ApiError(400, "A node cannot be both spot and preemptible.", "badRequest")
        metadata, labels = body.get("metadata") or {}, body.get("labels") or {}
        if not all(isinstance(v, str) for v in [*metadata.values(), *labels.values()]):
            raise ApiError(400, "metadata and labels values must be strings.", "badRequest")
        network = body.get("networkConfig") or {}
        return TpuNode(
            name=node_id,
            zone=zone,
            type=tpu,
            runtime_version=version,
            spot=bool(scheduling.get("spot")),
            preemptible=bool(scheduling.get("preemptible")),
            labels=dict(labels),
            metadata=dict(metadata),
            description=str(body.get("description") or ""),
            extra={k: v for k, v in body.items() if k in _NODE_INPUT and k not in _MODELLED},
            by_config="acceleratorConfig" in body,
            external_ips=bool(network.get("enableExternalIps", True)),
        )

    @staticmethod
    def _type_of(body: dict[str, Any]) -> TpuType:
        if "acceleratorConfig" in body:
            config = body["acceleratorConfig"] or {}
            found = type_from_config(str(config.get("type", "")), str(config.get("topology", "")))
            if found is None:
                raise ApiError(
                    400, f"Accelerator config {json.dumps(config)} is not supported.", "badRequest"
                )
            return found
        name = body.get("acceleratorType")
        if not name:
            raise ApiError(400, "Either acceleratorType or acceleratorConfig is required.", "badRequest")
        found = parse_type(str(name))
        if found is None:
            raise ApiError(400, f"Accelerator type {name} is not available.", "badRequest")
        return found

    async def delete_node(self, request: web.Request, zone: str) -> web.Response:
        node = self.nodes.find(zone, request.match_info["node"])
        if node.state == "DELETING":
            raise ApiError(400, f"Node {node.name} is already being deleted.", "failedPrecondition")
        return json_response(operation_json(self.project, self.nodes.delete(node)))

    async def patch_node(self, request: web.Request, zone: str) -> web.Response:
        node = self.nodes.find(zone, request.match_info["node"])
        mask = [m for m in request.query.get("updateMask", "").split(",") if m]
        if not mask:
            raise ApiError(400, "updateMask is required.", "badRequest")
        body = await _body(request)
        for field in mask:
            if field not in _UPDATABLE:
                raise ApiError(400, f"Field {field} cannot be updated.", "badRequest")
        if "metadata" in mask:
            node.metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
        if "labels" in mask:
            node.labels = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
        if "description" in mask:
            node.description = str(body.get("description") or "")
        op = self.nodes._operation(node, "update")
        op.finish(node_json(self.project, node))
        return json_response(operation_json(self.project, op))

    async def start_node(self, request: web.Request, zone: str) -> web.Response:
        await _body(request)
        node = self.nodes.find(zone, request.match_info["node"])
        return json_response(operation_json(self.project, self.nodes.start(node)))

    async def stop_node(self, request: web.Request, zone: str) -> web.Response:
        await _body(request)
        node = self.nodes.find(zone, request.match_info["node"])
        return json_response(operation_json(self.project, self.nodes.stop(node)))

    async def guest_attributes(self, request: web.Request, zone: str) -> web.Response:
        """Each worker's ``hostkeys/`` guest attributes (what gcloud pins SSH host keys from)."""
        node = self.nodes.find(zone, request.match_info["node"])
        body = await _body(request)
        path = str(body.get("queryPath") or "")
        # gcloud asks for every worker with workerIds [""]: an empty id means all of them.
        wanted = [w for w in body.get("workerIds") or [] if w != ""]
        workers = node.workers
        if wanted:
            try:
                workers = [node.workers[int(w)] for w in wanted]
            except (ValueError, IndexError):
                raise ApiError(400, f"Invalid worker ids {wanted}.", "badRequest") from None
        attributes = []
        for worker in workers:
            items = [
                {"namespace": "hostkeys", "key": algorithm, "value": key}
                for algorithm, key in self.nodes.host.host_keys(worker)
                if not path or "hostkeys/".startswith(path) or path.startswith("hostkeys/")
            ]
            entry: dict[str, Any] = {"queryPath": path} if path else {}
            entry["queryValue"] = {"items": items} if items else {}
            attributes.append(entry)
        return json_response({"guestAttributes": attributes})

    # -- operations, types, versions -------------------------------------------------------------------

    async def list_operations(self, request: web.Request, zone: str) -> web.Response:
        ops = [op for (z, _), op in self.nodes.operations.items() if zone in ("-", z)]
        return _page(request, [operation_json(self.project, op) for op in ops], "operations")

    async def get_operation(self, request: web.Request, zone: str) -> web.Response:
        return json_response(
            operation_json(self.project, self.nodes.operation(zone, request.match_info["op"]))
        )

    async def list_types(self, request: web.Request, zone: str) -> web.Response:
        return _page(request, accelerator_types_json(self.project, zone), "acceleratorTypes")

    async def get_type(self, request: web.Request, zone: str) -> web.Response:
        found = parse_type(request.match_info["type"])
        if found is None:
            raise ApiError(404, f"Accelerator type {request.match_info['type']} not found.", "notFound")
        return json_response(accelerator_type_json(self.project, zone, found))

    async def list_versions(self, request: web.Request, zone: str) -> web.Response:
        return _page(request, runtime_versions_json(self.project, zone), "runtimeVersions")

    async def get_version(self, request: web.Request, zone: str) -> web.Response:
        wanted = request.match_info["v"]
        for version in runtime_versions_json(self.project, zone):
            if version["version"] == wanted:
                return json_response(version)
        raise ApiError(404, f"Runtime version {wanted} not found.", "notFound")

    # -- queued resources ------------------------------------------------------------------------------

    async def list_queued(self, request: web.Request, zone: str) -> web.Response:
        found = [q for (z, _), q in sorted(self.nodes.queued.items()) if zone in ("-", z)]
        return _page(request, [queued_json(self.project, q) for q in found], "queuedResources")

    async def get_queued(self, request: web.Request, zone: str) -> web.Response:
        return json_response(queued_json(self.project, self._queued(zone, request.match_info["qr"])))

    def _queued(self, zone: str, name: str) -> QueuedResource:
        found = self.nodes.queued.get((zone, name))
        if found is None:
            raise ApiError(404, f"{self.nodes.parent(zone)}/queuedResources/{name} not found", "notFound")
        return found

    async def create_queued(self, request: web.Request, zone: str) -> web.Response:
        name = request.query.get("queuedResourceId", "")
        if not valid_name(name):
            raise ApiError(400, f"Invalid queued resource ID '{name}'.", "badRequest")
        body = await _body(request)
        names_for_numbers(body, _QUEUED_ENUMS, "queued_resource")
        specs = ((body.get("tpu") or {}).get("nodeSpec")) or []
        if len(specs) != 1 or not isinstance(specs[0], dict):
            raise ApiError(400, "Exactly one tpu.nodeSpec is supported.", "badRequest")
        spec = specs[0]
        node_body = spec.get("node") or {}
        node = self._node_from(
            node_body, str(spec.get("nodeId", "")), zone, "queued_resource.tpu.node_spec[0].node"
        )
        spot = "spot" in body
        if spot:
            node.spot = True
        queued = QueuedResource(name, zone, node.name, node_body, spot=spot)
        op = self.nodes.queue(queued, node)
        # The operation's result is the queued resource as accepted, as Google's is.
        op.response = {"@type": "type.googleapis.com/google.cloud.tpu.v2.QueuedResource",
                       **queued_json(self.project, queued)}  # fmt: skip
        return json_response(operation_json(self.project, op))

    async def delete_queued(self, request: web.Request, zone: str) -> web.Response:
        queued = self._queued(zone, request.match_info["qr"])
        # force: the queued resource's node goes with it (otherwise an active node is refused).
        if request.query.get("force", "").lower() in ("true", "1"):
            node = self.nodes.nodes.get((zone, queued.node_id))
            if node is not None and node.state != "DELETING":
                self.nodes.delete(node)
            queued.state = "DELETING"
        op = self.nodes.unqueue(queued)
        return json_response(operation_json(self.project, op))

    # -- locations -------------------------------------------------------------------------------------

    def _location(self, zone: str) -> dict[str, Any]:
        return {"name": f"projects/{self.project}/locations/{zone}", "locationId": zone}

    async def list_locations(self, request: web.Request, zone: str) -> web.Response:
        return _page(request, [self._location(z) for z in sorted(self.zones)], "locations")

    async def get_location(self, request: web.Request, zone: str) -> web.Response:
        if zone == "-":
            raise ApiError(404, f"Location {zone} not found.", "notFound")
        return json_response(self._location(zone))
