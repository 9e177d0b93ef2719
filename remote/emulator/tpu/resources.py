"""The TPU API's JSON: nodes, operations, queued resources, as proto3 JSON (defaults left out,
int64 as strings, enums by name), the way ``tpu.googleapis.com`` v2 answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gcptui.remote.emulator.tpu.types import RUNTIME_VERSIONS, TpuType, offered_types

if TYPE_CHECKING:
    from gcptui.remote.emulator.tpu.state import QueuedResource, TpuNode, TpuOperation

TPU_PORT = 8470  # networkEndpoints[].port: the TPU runtime's own port, not SSH


def node_json(project: str, node: TpuNode) -> dict[str, Any]:
    region = node.zone.rsplit("-", 1)[0]
    body: dict[str, Any] = {
        **node.extra,
        "name": f"projects/{project}/locations/{node.zone}/nodes/{node.name}",
        "state": node.state,
        "runtimeVersion": node.runtime_version,
        "networkConfig": {
            "network": f"projects/{project}/global/networks/default",
            "subnetwork": f"projects/{project}/regions/{region}/subnetworks/default",
            **({"enableExternalIps": True} if node.external_ips else {}),
        },
        "cidrBlock": "10.128.0.0/20",
        "createTime": node.created,
        "id": str(node.id),
        "apiVersion": "V2",
    }
    if node.by_config:
        body["acceleratorConfig"] = {"type": node.type.api_type, "topology": node.type.topology}
    else:
        body["acceleratorType"] = node.type.name
    scheduling = {key: True for key, on in (("preemptible", node.preemptible), ("spot", node.spot)) if on}
    if scheduling:
        body["schedulingConfig"] = scheduling
    if node.health:
        body["health"] = node.health
    if node.description:
        body["description"] = node.description
    if node.labels:
        body["labels"] = dict(node.labels)
    if node.metadata:
        body["metadata"] = dict(node.metadata)
    if node.queued_resource:
        body["queuedResource"] = node.queued_resource
    if node.state not in ("CREATING",):
        endpoints = []
        for worker in node.workers:
            endpoint: dict[str, Any] = {"ipAddress": worker.network_ip, "port": TPU_PORT}
            if worker.external_ip:
                endpoint["accessConfig"] = {"externalIp": worker.external_ip}
            endpoints.append(endpoint)
        body["networkEndpoints"] = endpoints
    return body


def operation_json(project: str, op: TpuOperation) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"projects/{project}/locations/{op.zone}/operations/{op.name}",
        "metadata": {
            # google-cloud-tpu decodes the metadata as this message; another type fails its parse.
            "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
            "createTime": op.created,
            "target": op.target,
            "verb": op.verb,
            "cancelRequested": False,
            "apiVersion": "v2",
            **({"endTime": op.ended} if op.ended else {}),
        },
        "done": op.done,
    }
    if op.error is not None:
        body["error"] = op.error
    elif op.response is not None:
        body["response"] = (
            op.response
            if "@type" in op.response
            else {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node", **op.response}
        )
    return body


def queued_json(project: str, queued: QueuedResource) -> dict[str, Any]:
    parent = f"projects/{project}/locations/{queued.zone}"
    body: dict[str, Any] = {
        "name": f"{parent}/queuedResources/{queued.name}",
        "createTime": queued.created,
        "tpu": {
            "nodeSpec": [{"parent": parent, "nodeId": queued.node_id, "node": queued.node_body}],
        },
        "state": {
            "state": queued.state,
            "stateInitiator": "SERVICE" if queued.state != "ACCEPTED" else "USER",
        },
    }
    if queued.spot:
        body["spot"] = {}
    return body


def accelerator_type_json(project: str, zone: str, tpu: TpuType) -> dict[str, Any]:
    return {
        "name": f"projects/{project}/locations/{zone}/acceleratorTypes/{tpu.name}",
        "type": tpu.name,
        "acceleratorConfigs": [{"type": tpu.api_type, "topology": tpu.topology}],
    }


def accelerator_types_json(project: str, zone: str) -> list[dict[str, Any]]:
    return [accelerator_type_json(project, zone, tpu) for tpu in offered_types()]


def runtime_versions_json(project: str, zone: str) -> list[dict[str, Any]]:
    return [
        {"name": f"projects/{project}/locations/{zone}/runtimeVersions/{v}", "version": v}
        for v in RUNTIME_VERSIONS
    ]
