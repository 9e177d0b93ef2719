"""The panes a logs screen opens for some machines: the job's log and ``[logs] files`` of each.

Each pane follows its VM by name (``Services.follow``): after a preemption or a restart it
reconnects to the VM's new address without leaving the screen.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

from gcptui.remote.cloud.fleet import FleetSnapshot
from gcptui.remote.config import LogsConfig
from gcptui.remote.jobs.protocol import log_path
from gcptui.remote.models import Instance
from gcptui.remote.services import FollowingGetter, Services
from gcptui.remote.telemetry.log_stream import LogEvent, LogStream
from gcptui.tui.logs.screen import PaneSource


def log_events(get: FollowingGetter, path: str, history_lines: int) -> AsyncIterator[LogEvent]:
    """A fresh stream of one remote file (the logs screen opens one per pane, again after a reset)."""
    return LogStream(get, path, history_lines=history_lines, where=lambda: get.where).events()


def vertex_events(services: Services, instance: Instance, logs: LogsConfig) -> AsyncIterator[LogEvent]:
    """A Vertex AI job's lines from Cloud Logging (``remote/vertex_workflows.py``)."""
    from gcptui.remote.vertex_workflows import job_log_events, settle_seconds

    rest = services.compute.of(instance).rest()  # type: ignore[attr-defined]
    name = instance.instance_id or instance.name
    return job_log_events(
        rest, name, history_lines=logs.history_lines, settle_seconds=settle_seconds(services.config)
    )


def pane_sources(
    services: Services, snapshot: FleetSnapshot, names: list[str], logs: LogsConfig, slot: int = 0
) -> tuple[list[PaneSource], list[str]]:
    """The panes for ``names``, and the names that cannot be reached over SSH.

    ``slot`` > 0 (a sweep's second trial on a VM, ...): that job slot's log alone, titled ``NAME:SLOT``.
    """
    sources: list[PaneSource] = []
    unreachable: list[str] = []
    from gcptui.remote.vertex_workflows import is_vertex_job

    for name in names:
        instance = snapshot.find(name)
        if instance is not None and is_vertex_job(services.compute, instance):  # its lines: Cloud Logging
            sources.append(PaneSource(name, functools.partial(vertex_events, services, instance, logs)))
            continue
        if instance is None or services.target_or_none(instance) is None:
            unreachable.append(name)
            continue
        get = services.follow(instance)
        job_log = log_path(slot)
        for path in (job_log,) if slot else (job_log, *logs.files):
            if path == job_log:
                label = f"{name}:{slot}" if slot else name
            else:
                label = f"{name}:{path.rsplit('/', 1)[-1]}"
            sources.append(PaneSource(label, functools.partial(log_events, get, path, logs.history_lines)))
    return sources, unreachable
