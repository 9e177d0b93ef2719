"""A cluster's workloads (StatefulSets, Jobs, bare pods) as fleet rows whose workers are their pods.

The JSON comes from the cluster's API server, whose objects a pod's own service account may be
allowed to write: it is read totally (a field of the wrong type is left out) and bounded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gcptui.remote.compute.gke.states import pod_state
from gcptui.remote.models import Gpu, Instance, State, Worker

SPOT_LABEL = "cloud.google.com/gke-spot"
POOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
ZONE_LABEL = "topology.kubernetes.io/zone"
TYPE_LABEL = "node.kubernetes.io/instance-type"
KINDS = ("StatefulSet", "Job", "Pod")
MAX_TEXT = 253


@dataclass(frozen=True, slots=True)
class Node:
    """What a node bills as: a GCE VM of its machine type, in its zone, Spot or not, with its GPUs."""

    name: str
    pool: str
    machine_type: str
    zone: str
    spot: bool
    accelerator: str
    gpus: int
    usd_per_hour: float | None = None

    def as_vm(self) -> Instance:
        """The node as the GCE VM it is, for the price book (GKE bills Standard nodes as VMs)."""
        return Instance(name=self.name, zone=self.zone, status="RUNNING", source="gce",
                        machine_type=self.machine_type, spot=self.spot,
                        gpus=(Gpu(self.accelerator, self.gpus),) if self.accelerator and self.gpus else ())  # fmt: skip


def node_facts(node: dict[str, Any], location: str) -> Node:
    """A node's JSON (from the API server: read totally) as its billing facts."""
    meta = _dict(node.get("metadata"))
    labels = _labels(meta.get("labels"))
    capacity = _dict(_dict(node.get("status")).get("capacity"))
    gpus = capacity.get("nvidia.com/gpu")
    count = int(gpus) if isinstance(gpus, str) and gpus.isdigit() and len(gpus) < 4 else 0
    return Node(name=_str(meta.get("name")), pool=labels.get(POOL_LABEL, ""), machine_type=labels.get(TYPE_LABEL, ""),
                zone=labels.get(ZONE_LABEL, "") or location, spot=labels.get(SPOT_LABEL) == "true",
                accelerator=labels.get(ACCELERATOR_LABEL, ""), gpus=count)  # fmt: skip


def occupied(pods: list[dict[str, Any]], nodes: dict[str, Node]) -> list[Node]:
    """The nodes ``pods`` run on, each once, by name."""
    names = {_str(_dict(p.get("spec")).get("nodeName")) for p in pods}
    return [nodes[n] for n in sorted(names) if n in nodes]


def priced_nodes(nodes: list[Node], hourly: Callable[[Instance], float | None]) -> list[Node]:
    return [replace(n, usd_per_hour=hourly(n.as_vm())) for n in nodes]


def nodes_price(nodes: list[Node]) -> float | None:
    """USD per hour of ``nodes`` together; None when one of them has no price (never a partial sum)."""
    prices = [n.usd_per_hour for n in nodes]
    if not prices or any(p is None for p in prices):
        return None
    return round(sum(p for p in prices if p is not None), 4)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _labels(value: object) -> dict[str, str]:
    return {k[:MAX_TEXT]: v[:MAX_TEXT] for k, v in list(_dict(value).items())[:256]
            if isinstance(k, str) and isinstance(v, str)}  # fmt: skip


def owner(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the pod's controller, None for a bare pod."""
    refs = _dict(pod.get("metadata")).get("ownerReferences")
    for ref in refs[:16] if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return _str(ref.get("kind")), _str(ref.get("name"))
    return None


def restarts(pod: dict[str, Any]) -> int:
    statuses = _dict(pod.get("status")).get("containerStatuses")
    total = 0
    for status in statuses[:64] if isinstance(statuses, list) else []:
        count = _dict(status).get("restartCount")
        total += count if isinstance(count, int) and count >= 0 else 0
    return total


def gpu_requests(pod: dict[str, Any]) -> int:
    containers = _dict(pod.get("spec")).get("containers")
    total = 0
    for container in containers[:64] if isinstance(containers, list) else []:
        resources = _dict(_dict(container).get("resources"))
        value = _dict(resources.get("limits")).get("nvidia.com/gpu") or _dict(resources.get("requests")).get(
            "nvidia.com/gpu"
        )
        text = str(value) if isinstance(value, (int, str)) else ""
        total += int(text) if text.isdigit() and len(text) < 4 else 0
    return total


def _ordinal(pod: dict[str, Any]) -> tuple[int, str]:
    name = _str(_dict(pod.get("metadata")).get("name"))
    tail = name.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() and len(tail) < 7 else 1 << 30, name)


def workload_rows(objects: dict[str, list[dict[str, Any]]], nodes: list[dict[str, Any]], location: str,
                  cluster: str) -> list[Instance]:  # fmt: skip
    """One row per workload: StatefulSets and Jobs with their pods, and each pod no controller owns."""
    by_node = {
        _str(_dict(n.get("metadata")).get("name")): _labels(_dict(n.get("metadata")).get("labels"))
        for n in nodes
    }
    pods: dict[tuple[str, str], list[dict[str, Any]]] = {}
    bare: list[dict[str, Any]] = []
    for pod in objects.get("Pod", []):
        found = owner(pod)
        if found is None:
            bare.append(pod)
        else:
            pods.setdefault(found, []).append(pod)
    rows: list[Instance] = []
    for kind in ("StatefulSet", "Job"):
        for obj in objects.get(kind, []):
            name = _str(_dict(obj.get("metadata")).get("name"))
            if name:
                rows.append(
                    _row(
                        kind,
                        obj,
                        sorted(pods.get((kind, name), []), key=_ordinal),
                        by_node,
                        location,
                        cluster,
                    )
                )
    for pod in bare:
        if _str(_dict(pod.get("metadata")).get("name")):
            rows.append(_row("Pod", pod, [pod], by_node, location, cluster))
    return rows


def _status(kind: str, obj: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[str, State]:
    """The workload's own word and its neutral state."""
    if _dict(obj.get("metadata")).get("deletionTimestamp"):
        return "Terminating", State.DELETING
    if kind == "Job":
        conditions = _dict(obj.get("status")).get("conditions")
        for condition in conditions[:32] if isinstance(conditions, list) else []:
            condition = _dict(condition)
            if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
                word = _str(condition.get("type"))
                if word == "Failed" and any(pod_state(p) is State.PREEMPTED for p in pods):
                    return word, State.PREEMPTED  # its backoff spent on a Spot node's shutdown: recoverable
                return word, State.SUCCEEDED if word == "Complete" else State.FAILED
    states = [pod_state(p) for p in pods]
    if not states:
        return "Pending", State.PROVISIONING
    for state in (State.PREEMPTED, State.FAILED, State.PROVISIONING, State.DELETING, State.UNKNOWN):
        if state in states:
            pod = pods[states.index(state)]
            return _str(_dict(pod.get("status")).get("phase")) or "Unknown", state
    if all(s is State.SUCCEEDED for s in states):
        return "Succeeded", State.SUCCEEDED
    return "Running", State.RUNNING


def _row(kind: str, obj: dict[str, Any], pods: list[dict[str, Any]], nodes: dict[str, dict[str, str]],
         location: str, cluster: str) -> Instance:  # fmt: skip
    meta = _dict(obj.get("metadata"))
    status, state = _status(kind, obj, pods)
    workers = tuple(Worker(name=_str(_dict(p.get("metadata")).get("name")),
                           address=_str(_dict(p.get("status")).get("podIP")) or None, state=pod_state(p))
                    for p in pods[:4096])  # fmt: skip
    node_labels = [nodes.get(_str(_dict(p.get("spec")).get("nodeName")), {}) for p in pods]
    first = next((n for n in node_labels if n), {})
    gpus = sum(gpu_requests(p) for p in pods)
    accelerator = first.get(ACCELERATOR_LABEL, "")
    labels = _labels(meta.get("labels"))
    labels.update(
        {"gke-kind": kind, "gke-cluster": cluster, "gke-restarts": str(sum(restarts(p) for p in pods))}
    )
    if first.get(POOL_LABEL):
        labels["gke-node-pool"] = first[POOL_LABEL]
    return Instance(
        name=_str(meta.get("name")), zone=location, status=status, state=state, source="gke",
        machine_type=first.get("node.kubernetes.io/instance-type", ""),
        gpus=(Gpu(accelerator or "nvidia.com/gpu", gpus),) if gpus else (),
        spot=any(n.get(SPOT_LABEL) == "true" for n in node_labels), labels=labels,
        instance_id=_str(meta.get("uid")) or None, workers=workers,
        internal_ip=workers[0].address if workers else None,  # rank 0's pod: where its shell and metrics are
        preempted=state is State.PREEMPTED, last_start=_str(meta.get("creationTimestamp")) or None,
    )  # fmt: skip


def pod_row(parent: Instance, pod: dict[str, Any], nodes: dict[str, dict[str, str]]) -> Instance:
    """A pod's own row, ``WORKLOAD/POD``: its node, restarts, Spot node, phase."""
    meta, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    node = _str(spec.get("nodeName"))
    labels = nodes.get(node, {})
    state = pod_state(pod)
    return Instance(
        name=f"{parent.name}/{_str(meta.get('name'))}", zone=parent.zone, status=_str(status.get("phase")) or "Unknown",
        state=state, source="gke", parent=parent.name, machine_type=labels.get("node.kubernetes.io/instance-type", ""),
        spot=labels.get(SPOT_LABEL) == "true", internal_ip=_str(status.get("podIP")) or None,
        labels={"gke-node": node, "gke-restarts": str(restarts(pod)), "gke-cluster": parent.labels.get("gke-cluster", "")},
        instance_id=_str(meta.get("uid")) or None, preempted=state is State.PREEMPTED,
    )  # fmt: skip
