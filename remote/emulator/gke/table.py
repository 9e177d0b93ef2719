"""Server-side printing: the ``meta.k8s.io/v1`` ``Table`` kubectl asks for (``Accept: ...;as=Table``)
to print ``kubectl get`` without ``-o``: the columns the real API server prints for each kind."""

from __future__ import annotations

import calendar
import time
from typing import Any

_STRING, _INTEGER = "string", "integer"
COLUMNS = {
    "pods": [("Name", _STRING, 0), ("Ready", _STRING, 0), ("Status", _STRING, 0), ("Restarts", _STRING, 0),
             ("Age", _STRING, 0), ("IP", _STRING, 1), ("Node", _STRING, 1)],
    "statefulsets": [("Name", _STRING, 0), ("Ready", _STRING, 0), ("Age", _STRING, 0)],
    "jobs": [("Name", _STRING, 0), ("Status", _STRING, 0), ("Completions", _STRING, 0), ("Age", _STRING, 0)],
    "nodes": [("Name", _STRING, 0), ("Status", _STRING, 0), ("Roles", _STRING, 0), ("Age", _STRING, 0),
              ("Version", _STRING, 0)],
}  # fmt: skip


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def age(stamp: str | None) -> str:
    """kubectl's human duration of the time since ``stamp``."""
    if not stamp:
        return "<unknown>"
    seconds = max(0, int(time.time() - calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{days}d"


def _pod(pod: dict[str, Any]) -> list[Any]:
    status = pod.get("status", {})
    containers = status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    word = status.get("reason") or status.get("phase", "Unknown")
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            word = waiting["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        word = "Terminating"
    restarts = sum(int(c.get("restartCount", 0)) for c in containers)
    return [pod["metadata"]["name"], f"{ready}/{len(pod['spec']['containers'])}", word, str(restarts),
            age(pod["metadata"].get("creationTimestamp")), status.get("podIP", "<none>"),
            pod["spec"].get("nodeName", "<none>")]  # fmt: skip


def _row(resource: str, obj: dict[str, Any]) -> list[Any]:
    meta = obj["metadata"]
    status = obj.get("status", {})
    if resource == "pods":
        return _pod(obj)
    if resource == "statefulsets":
        return [meta["name"], f"{status.get('readyReplicas', 0)}/{obj['spec'].get('replicas', 1)}",
                age(meta.get("creationTimestamp"))]  # fmt: skip
    if resource == "jobs":
        done = [c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"]
        word = "Complete" if "Complete" in done else "Failed" if "Failed" in done else "Running"
        return [meta["name"], word, f"{status.get('succeeded', 0)}/{obj['spec'].get('completions', 1)}",
                age(meta.get("creationTimestamp"))]  # fmt: skip
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return [meta["name"], "Ready" if ready else "NotReady", "<none>", age(meta.get("creationTimestamp")),
            status.get("nodeInfo", {}).get("kubeletVersion", "")]  # fmt: skip


def table(
    resource: str, items: list[dict[str, Any]], list_meta: dict[str, Any], include: str
) -> dict[str, Any] | None:
    """The Table of ``items`` (None for a kind without printed columns: the plain object then)."""
    columns = COLUMNS.get(resource)
    if columns is None:
        return None
    rows = []
    for obj in items:
        if include == "None":
            embedded: Any = None
        elif include == "Object":
            embedded = obj
        else:
            embedded = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append({"cells": _row(resource, obj), "object": embedded})
    definitions = [{"name": name, "type": kind, "format": "name" if name == "Name" else "", "description": "",
                    "priority": priority} for name, kind, priority in columns]  # fmt: skip
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": definitions,
            "rows": rows}  # fmt: skip
