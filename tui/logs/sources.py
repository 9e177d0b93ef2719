"""The panes a logs screen opens for some machines: the job's log and ``[logs] files`` of each.

Each pane reads over its machine's exec channel (``Services.channel``), which follows a VM by name:
after a preemption or a restart it reconnects to the VM's new address without leaving the screen (a
pod's channel is Kubernetes exec). A row whose lines are in Cloud Logging (``CLOUD_LOGS``: a Vertex
AI job) is read from there instead; so is a GKE pod's containers' own output (``CONTAINER_LOGS``,
the Kubernetes log API, one pane per pod) when their command is the training (no ``[job].command``),
since then no job log exists in the pod.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable

from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.config import LogsConfig
from gcptui.remote.jobs.protocol import log_path
from gcptui.remote.models import FleetSnapshot, Instance
from gcptui.remote.services import Services
from gcptui.remote.telemetry.log_stream import LogEvent, LogStream
from gcptui.tui.logs.screen import PaneSource


def log_events(channel: ExecChannel, path: str, history_lines: int) -> AsyncIterator[LogEvent]:
    """A fresh stream of one remote file (the logs screen opens one per pane, again after a reset)."""
    return LogStream(channel, path, history_lines=history_lines).events()


def cloud_log_events(services: Services, instance: Instance, logs: LogsConfig) -> AsyncIterator[LogEvent]:
    """The lines of a row that keeps them in Cloud Logging (a Vertex AI job: ``vertex_workflows.py``)."""
    from gcptui.remote.vertex_workflows import row_log_events, settle_seconds

    return row_log_events(
        services.compute,
        instance,
        history_lines=logs.history_lines,
        settle_seconds=settle_seconds(services.config),
    )


def container_log_events(services: Services, row: Instance, logs: LogsConfig) -> AsyncIterator[LogEvent]:
    """A pod's containers' own output from the Kubernetes log API (``gke_workflows.py``)."""
    from gcptui.remote.gke_workflows import container_log_events as events

    return events(services.compute, row, history_lines=logs.history_lines)


def pane_sources(
    services: Services,
    snapshot: FleetSnapshot,
    names: list[str],
    logs: LogsConfig,
    slot: int = 0,
    started: Callable[[str], bool] = lambda _name: False,
) -> tuple[list[PaneSource], list[str]]:
    """The panes for ``names``, and the names that nothing reaches (no address, no shell).

    ``slot`` > 0 (a sweep's second trial on a VM, ...): that job slot's log alone, titled ``NAME:SLOT``.
    A GKE workload's panes are its pods' containers' output, plus the job's own log when ``started``
    says gcptui started a job there; a TPU node's, one per worker (``NODE/w0``, ``NODE/w1``, ...).
    """
    sources: list[PaneSource] = []
    unreachable: list[str] = []
    for name in names:
        instance = snapshot.find(name)
        if instance is not None and services.compute.can(instance, Capability.CLOUD_LOGS):
            sources.append(PaneSource(name, functools.partial(cloud_log_events, services, instance, logs)))
            continue
        container = instance is not None and services.compute.can(instance, Capability.CONTAINER_LOGS)
        if container and instance is not None:
            from gcptui.remote.gke_workflows import log_pane_rows

            for pod in log_pane_rows(services.compute, instance):
                sources.append(
                    PaneSource(pod.name, functools.partial(container_log_events, services, pod, logs))
                )
        workers = () if instance is None or container else services.compute.of(instance).worker_rows(instance)
        machines: list[tuple[Instance | None, str]] = [(w, w.name) for w in workers] or [(instance, name)]
        for machine, title in machines:
            channel = services.channel_or_none(machine) if machine is not None else None
            if channel is None:
                if not container:
                    unreachable.append(title)
                continue
            job_log = log_path(slot)
            # The containers' output stands for the job log of a job gcptui did not start; ``[logs]
            # files`` are still files in the pod.
            own = () if container and not started(name) else (job_log,)
            for path in own if slot else (*own, *logs.files):
                if path == job_log:
                    label = f"{title}:{slot}" if slot else title
                else:
                    label = f"{title}:{path.rsplit('/', 1)[-1]}"
                sources.append(
                    PaneSource(label, functools.partial(log_events, channel, path, logs.history_lines))
                )
    return sources, unreachable
