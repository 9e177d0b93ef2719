"""``pods/NAME/log``: a container's output (this run's, or the previous run's), follow, tailLines,
timestamps, sinceSeconds, sinceTime, limitBytes, as the kubelet answers them through the API server."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gcptui.remote.emulator.gke.resources import status

if TYPE_CHECKING:
    from gcptui.remote.emulator.gke.cluster import Cluster

POLL = 0.1  # seconds between looks at a followed log file


def _bad(message: str) -> web.Response:
    return web.Response(
        status=400, text=json.dumps(status(400, "BadRequest", message)), content_type="application/json"
    )


def _number(request: web.Request, key: str) -> int | None:
    value = request.query.get(key)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _since(line: bytes, seconds: int | None) -> bool:
    if seconds is None:
        return True
    stamp = line.split(b" ", 1)[0].decode(errors="replace")
    try:
        at = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    except ValueError:
        return True
    return at >= time.time() - seconds - 1


async def serve_log(
    request: web.Request, cluster: Cluster, namespace: str, pod: dict[str, Any]
) -> web.StreamResponse:
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in pod["spec"]["containers"]]
    container = request.query.get("container") or containers[0]
    if container not in containers:
        return _bad(f"container {container} is not valid for pod {name}")
    statuses = pod["status"].get("containerStatuses") or []
    restarts = int(statuses[0].get("restartCount", 0)) if statuses else 0
    previous = request.query.get("previous") in ("1", "true")
    runner = cluster.runners.get((namespace, name))
    logs = cluster.root / "logs" / namespace / name
    run = restarts - 1 if previous else restarts
    path = logs / f"{run}.log"
    if previous and (run < 0 or not path.exists()):
        return _bad(f'previous terminated container "{container}" in pod "{name}" not found')
    if not path.exists():
        return _bad(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
    timestamps = request.query.get("timestamps") in ("1", "true")
    tail, since, limit = (
        _number(request, "tailLines"),
        _number(request, "sinceSeconds"),
        _number(request, "limitBytes"),
    )
    # sinceTime (RFC 3339, whole seconds as the API server takes it): lines stamped from that second.
    since_time = request.query.get("sinceTime", "")[:19].encode()
    follow = request.query.get("follow") in ("1", "true") and not previous
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    sent = 0

    async def send(lines: list[bytes]) -> bool:
        nonlocal sent
        for line in lines:
            if not _since(line, since) or (since_time and line[:19] < since_time):
                continue
            text = line + b"\n" if timestamps else line.split(b" ", 1)[-1] + b"\n"
            if limit is not None and sent + len(text) > limit:
                await response.write(text[: limit - sent])
                return False
            sent += len(text)
            await response.write(text)
        return True

    try:
        with path.open("rb") as handle:
            data = handle.read()
            lines, pending = _split(data)
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            going = await send(lines)
            while (
                going and follow and _running(cluster, namespace, name, pod["metadata"]["uid"], run, runner)
            ):
                await asyncio.sleep(POLL)
                more, pending = _split(pending + handle.read())
                going = await send(more)
            if going and follow:
                more, pending = _split(pending + handle.read())
                await send(more)
        await response.write_eof()
    except ConnectionError:
        pass  # the reader went away (kubectl logs -f interrupted)
    return response


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    *lines, pending = data.split(b"\n")
    return lines, pending


def _running(cluster: Cluster, namespace: str, name: str, uid: str, run: int, runner: Any) -> bool:
    """The followed run goes on: same pod, same restart count, its container not terminated."""
    pod = cluster.store.get("pods", namespace, name)
    if pod is None or pod["metadata"]["uid"] != uid or cluster.runners.get((namespace, name)) is not runner:
        return False
    statuses = pod["status"].get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0)) == run and "terminated" not in (
        statuses[0].get("state") or {}
    )
