"""A workload's pods' logs, merged: each pod's container output through the log API
(``pods/NAME/log?follow&timestamps``), each line tagged with its pod, sanitized and bounded.

A followed pod is followed across container restarts and across its replacement by a new pod of
the same name (a StatefulSet's): when a stream ends, the pod is read again and, while it runs or
comes back, followed on from the last timestamp seen (``sinceTime``), so no line is repeated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gcptui.remote.aio import merged
from gcptui.remote.backoff import Backoff
from gcptui.remote.errors import GcptuiError, NotFoundError
from gcptui.remote.safe_text import sanitize

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from gcptui.remote.compute.gke.kube import KubeCluster

MAX_LINE = 16384


@dataclass(frozen=True, slots=True)
class LogLine:
    pod: str
    time: str  # RFC 3339 from the kubelet
    text: str  # sanitized, one line


async def _stream(cluster: KubeCluster, api: ApiClient, namespace: str, pod: str, since: str | None,
                  follow: bool, tail: int | None) -> AsyncIterator[LogLine]:  # fmt: skip
    query = [("timestamps", "true")] + ([("follow", "true")] if follow else [])
    query += [("sinceTime", since)] if since else ([("tailLines", str(tail))] if tail is not None else [])
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
    response = await cluster.open(api, path, query)
    try:
        pending = b""
        while chunk := await response.content.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_LINE:
                lines.append(pending[:MAX_LINE])
                pending = b""
            for line in lines:
                stamp, _, text = line[:MAX_LINE].decode("utf-8", "replace").partition(" ")
                yield LogLine(pod, stamp, sanitize(text.rstrip("\r"), colours=False))
    finally:
        response.release()


async def follow_pods(cluster: KubeCluster, api: ApiClient, namespace: str, pods: list[str], *,
                      follow: bool = True, tail: int | None = 100) -> AsyncIterator[LogLine]:  # fmt: skip
    """Every pod's lines as they come (merged in arrival order); ends when no pod is followed."""

    async def one(pod: str) -> AsyncIterator[LogLine]:
        since: str | None = None
        backoff = Backoff(0.2, 5.0)
        while True:
            try:
                async for line in _stream(cluster, api, namespace, pod, since, follow, tail):
                    if since is not None and line.time <= since:
                        continue  # sinceTime is to the second: skip what was already shown
                    since = line.time
                    yield line
                    backoff.reset()
            except NotFoundError:
                pass  # replaced: its successor of the same name may not exist yet
            except GcptuiError:
                if not follow:
                    return  # not started yet, or gone: nothing to show of it
            if not follow:
                return
            await asyncio.sleep(backoff.pause())

    async for line in merged(one(pod) for pod in pods):
        yield line
