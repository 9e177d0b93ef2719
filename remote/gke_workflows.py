"""GKE workflows above the backend, for the faces: a workload's pods' own output (the log API),
its restart through its controller, and what its deletion leaves billing.

The faces never test a row's ``source``: they ask here whether a row is a workload or one of its pods
(``gke_backend``: the row's ``CONTAINER_LOGS``), and reach it through the protocol's methods
(``pod_logs``, ``restart``, ``billing_nodes``), never the GKE backend's class."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from gcptui.remote.aio import merged
from gcptui.remote.compute.backend import Capability
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance, State
from gcptui.remote.safe_text import one_line
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice

if TYPE_CHECKING:
    from gcptui.remote.compute.backend import Backend
    from gcptui.remote.compute.gke.pod_exec import PodExecChannel
    from gcptui.remote.compute.registry import Compute
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.telemetry.progress import Progress


def gke_backend(compute: Compute, row: Instance) -> Backend | None:
    """The backend that listed ``row`` when it is a workload or one of its pods (its containers'
    command is the training: ``CONTAINER_LOGS``), else None."""
    return compute.of(row) if compute.can(row, Capability.CONTAINER_LOGS) else None


def is_workload(compute: Compute, row: Instance) -> bool:
    """A GKE workload's own row (not one of its pods)."""
    return gke_backend(compute, row) is not None and row.parent is None


async def pod_logs(
    compute: Compute, rows: list[Instance], *, follow: bool, tail: int | None
) -> AsyncIterator[tuple[str, str]]:
    """(``WORKLOAD/POD``, sanitized line) for every pod of ``rows`` (a workload's pods, or a pod row's own), merged
    as lines arrive; each pod followed across container restarts and its replacement. A stream that
    fails ends them all with its one-line error."""

    async def one(row: Instance) -> AsyncIterator[tuple[str, str]]:
        backend = gke_backend(compute, row)
        assert backend is not None
        workload = row.parent or row.name
        async for line in backend.pod_logs(row, follow=follow, tail=tail):
            yield f"{workload}/{line.pod}", line.text

    async for item in merged(one(row) for row in rows):
        yield item


# What `job status` shows as the command of a pod where gcptui started no job: its containers' own.
CONTAINER_COMMAND = "(the containers' own command)"
PROGRESS_TAIL = 2000  # the newest lines of rank 0's output read for where its run stands


def container_job(row: Instance, name: str | None = None) -> JobStatus:
    """The job of a GKE workload or pod row whose containers' own command is the training (gcptui
    started none there): the pod's state is the job's (running; ended: exited, 0 when it succeeded)."""
    from gcptui.remote.jobs.protocol import JobState, JobStatus

    state: JobState = "none"
    exit_code = None
    if row.state in (State.RUNNING, State.STOPPING):
        state = "running"
    elif row.state is State.SUCCEEDED:
        state, exit_code = "exited", 0
    elif row.state in (State.FAILED, State.PREEMPTED):
        state = "exited"
    detail = "preempted" if row.state is State.PREEMPTED else None
    return JobStatus(name=name or row.name, state=state, exit_code=exit_code, command=CONTAINER_COMMAND,
                     detail=detail)  # fmt: skip


def is_container_job(status: JobStatus | None) -> bool:
    """``status`` says what a pod's containers run (gcptui started no job there)."""
    return status is not None and status.command == CONTAINER_COMMAND


def container_job_of(compute: Compute, row: Instance, status: JobStatus) -> JobStatus:
    """``status`` of a GKE workload or pod where gcptui started no job (``none``): the job its
    containers' own command is; else ``status`` as it is."""
    if status.state != "none" or gke_backend(compute, row) is None:
        return status
    return container_job(row, status.name)


async def container_progress(compute: Compute, row: Instance) -> AsyncIterator[Progress]:
    """Where the run of a GKE workload's rank 0 (or a pod's own) stands, after each line of its
    containers' output that moved it (the log API, followed across restarts and a replacement pod):
    the trainer's progress records or its readable step lines."""
    from gcptui.remote.telemetry.progress import ProgressTracker

    backend = gke_backend(compute, row)
    pods = (backend.worker_rows(row) if row.parent is None else (row,)) if backend is not None else ()
    if backend is None or not pods:
        return
    tracker = ProgressTracker()
    async for line in backend.pod_logs(pods[0], follow=True, tail=PROGRESS_TAIL):
        if tracker.feed_output(line.text):
            yield tracker.progress


def log_pane_rows(compute: Compute, row: Instance) -> tuple[Instance, ...]:
    """The rows a logs screen gives a pane each for ``row``: a workload's pods (``WORKLOAD/POD``, in
    rank order, side by side), a pod row itself; a workload with no pod yet itself (its pane says so)."""
    if row.parent is not None:
        return (row,)
    return compute.of(row).worker_rows(row) or (row,)


async def container_log_events(
    compute: Compute, row: Instance, *, history_lines: int
) -> AsyncIterator[LogEvent]:
    """A logs pane's events for one pod (``row``: a pod row, or a workload: all its pods merged): its
    containers' own output from the Kubernetes log API, the last ``history_lines`` lines then new ones,
    followed across container restarts and a replacement pod of the same name."""
    backend = gke_backend(compute, row)
    if backend is None:
        yield LogNotice("error", f"{row.name} is not a GKE workload or pod: its output is not in a log API")
        return
    yield LogNotice("connecting", "Kubernetes log API")
    shown = 0
    following = False
    try:
        async for line in backend.pod_logs(row, follow=True, tail=history_lines):
            if not following:
                following = True
                yield LogNotice("following", "Kubernetes log API")
            shown += 1
            yield LogChunk([line.text], None, shown)
    except GcptuiError as error:
        yield LogNotice("error", one_line(str(error)))
        return
    yield LogNotice("ended", "no pod left to follow")


def restart(compute: Compute, row: Instance, image: str | None = None) -> str:
    """Recreate a workload's pods through its controller (``kubectl rollout restart``; with
    ``image``, rolled to that image); blocking."""
    backend = gke_backend(compute, row)
    if backend is None or row.parent is not None:
        raise GcptuiError(f"{row.name} is not a GKE workload: give the workload's name, not a pod's")
    backend.restart(row, image)
    if image:
        return f"{row.name}: pods being recreated by their StatefulSet with {image}"
    return f"{row.name}: pods being recreated by their StatefulSet"


def billing_lines(compute: Compute, rows: list[Instance]) -> list[str]:
    """One line per node that keeps billing once ``rows`` (GKE workloads) are deleted, and their total:
    the nodes of the node pools their pods occupy, until the cluster autoscaler removes them."""
    nodes = {}
    for row in rows:
        backend = gke_backend(compute, row)
        if backend is not None and row.parent is None:
            nodes.update({n.name: n for n in backend.billing_nodes(row)})
    lines = []
    for node in sorted(nodes.values(), key=lambda n: n.name):
        what = ", ".join(
            part
            for part in (
                node.machine_type,
                f"{node.gpus}× {node.accelerator}" if node.gpus and node.accelerator else "",
                "Spot" if node.spot else "",
                f"pool {node.pool}" if node.pool else "",
            )
            if part
        )
        price = f"${node.usd_per_hour:.2f}/h" if node.usd_per_hour is not None else "$?/h"
        lines.append(f"  {node.name} ({what}): {price}")
    prices = [n.usd_per_hour for n in nodes.values()]
    if prices and all(p is not None for p in prices):
        lines.append(f"  together ${sum(p for p in prices if p is not None):.2f}/h")
    return lines


# A pod's login shell: bash where the image has it, else sh (``kubectl exec -it POD -- sh`` users pick).
POD_SHELL = "command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l"


def pod_channel(compute: Compute, row: Instance) -> PodExecChannel:
    """Kubernetes exec into ``row``'s pod (a workload: its first pod), for ``gcptui ssh``'s terminal."""
    from gcptui.remote.compute.gke.pod_exec import PodExecChannel

    backend = gke_backend(compute, row)
    if backend is None:
        raise GcptuiError(f"{row.name} is not a GKE workload or pod")
    channel = backend.exec_channel(row)
    assert isinstance(channel, PodExecChannel)
    return channel
