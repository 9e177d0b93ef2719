"""A cluster's objects (etcd's part): one resourceVersion counter, the events watchers see, and a
short history so a watch that starts from a list's resourceVersion misses nothing."""

from __future__ import annotations

import asyncio
import copy
import secrets
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str, str]  # (resource, namespace or "", name)
HISTORY = 2000


def now_rfc3339(at: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if at is None else at))


@dataclass
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    resource: str
    obj: dict[str, Any]
    version: int


@dataclass
class Store:
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    version: int = 1
    history: deque[Event] = field(default_factory=lambda: deque(maxlen=HISTORY))
    watchers: set[asyncio.Queue[Event]] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def _emit(self, kind: str, resource: str, obj: dict[str, Any]) -> None:
        event = Event(kind, resource, copy.deepcopy(obj), self.version)
        self.history.append(event)
        for queue in list(self.watchers):
            queue.put_nowait(event)
        self.changed.set()
        self.changed = asyncio.Event()

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((resource, namespace, name))

    def select(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Sorted by namespace then name, as etcd's keys sort."""
        return [obj for (r, ns, _), obj in sorted(self.objects.items()) if r == resource
                and (namespace is None or ns == namespace)]  # fmt: skip

    def create(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if namespace:
            meta["namespace"] = namespace
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())  # a controller may pick it first
        meta["creationTimestamp"] = now_rfc3339()
        meta.setdefault("generation", 1)
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        self.objects[(resource, namespace, meta["name"])] = obj
        self._emit("ADDED", resource, obj)
        return obj

    def update(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        self.objects[(resource, meta.get("namespace", ""), meta["name"])] = obj
        self._emit("MODIFIED", resource, obj)
        return obj

    def remove(self, resource: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if self.objects.pop((resource, meta.get("namespace", ""), meta["name"]), None) is not None:
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            self._emit("DELETED", resource, obj)

    def since(self, version: int) -> list[Event] | None:
        """Events after ``version``; None when the history no longer reaches back that far (410 Gone)."""
        if self.history and self.history[0].version > version + 1 and version < self.version:
            return None
        return [e for e in self.history if e.version > version]
