"""The API groups, versions and resources an emulated cluster serves, as discovery lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Resource:
    group: str  # "" for core
    name: str  # plural
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]
    short: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    def discovery(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "singularName": self.kind.lower(), "namespaced": self.namespaced,
                                 "kind": self.kind, "verbs": list(self.verbs)}  # fmt: skip
        if self.short:
            entry["shortNames"] = list(self.short)
        if self.categories:
            entry["categories"] = list(self.categories)
        return entry


RESOURCES = (
    Resource("", "pods", "Pod", True, tuple(WRITE), ("po",), ("all",)),
    Resource("", "nodes", "Node", False, tuple(READ), ("no",)),
    Resource("", "namespaces", "Namespace", False, tuple(READ), ("ns",)),
    Resource("", "events", "Event", True, tuple(READ), ("ev",)),
    Resource("", "services", "Service", True, tuple(WRITE), ("svc",), ("all",)),
    Resource("", "configmaps", "ConfigMap", True, tuple(WRITE), ("cm",)),
    Resource("apps", "statefulsets", "StatefulSet", True, tuple(WRITE), ("sts",), ("all",)),
    Resource("batch", "jobs", "Job", True, tuple(WRITE), (), ("all",)),
)
SUBRESOURCES = {("", "pods/log"): ("Pod", ["get"]), ("", "pods/exec"): ("PodExecOptions", ["create", "get"]),
                ("apps", "statefulsets/status"): ("StatefulSet", ["get"]),
                ("apps", "statefulsets/scale"): ("Scale", ["get", "patch", "update"]),
                ("batch", "jobs/status"): ("Job", ["get"])}  # fmt: skip


def find(group: str, name: str) -> Resource | None:
    return next((r for r in RESOURCES if r.group == group and r.name == name), None)


def resource_list(group: str) -> dict[str, Any]:
    resources = [r.discovery() for r in RESOURCES if r.group == group]
    for (g, name), (kind, verbs) in SUBRESOURCES.items():
        if g == group:
            entry = {"name": name, "singularName": "", "namespaced": True, "kind": kind, "verbs": verbs}
            if kind == "Scale":  # the scale subresource speaks autoscaling/v1, as discovery says
                entry.update(group="autoscaling", version="v1")
            resources.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/v1" if group else "v1",
            "resources": resources}  # fmt: skip


def group_list() -> dict[str, Any]:
    groups = []
    for group in ("apps", "batch"):
        version = {"groupVersion": f"{group}/v1", "version": "v1"}
        groups.append({"name": group, "versions": [version], "preferredVersion": version})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``Status`` object, the Kubernetes API's error body."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}  # fmt: skip
    if details is not None:
        body["details"] = details
    return body
