"""What the curves screen follows for the machines it is opened on: one source per machine, a TPU
node's workers each their own (``NODE/w0``, ``NODE/w1``, ...: every worker of a multi-host job
writes its own metrics and event files, and a slow or lost worker shows as its own curve)."""

from __future__ import annotations

from collections.abc import Sequence

from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.jobs.protocol import metrics_path
from gcptui.remote.models import FleetSnapshot, Instance
from gcptui.remote.services import Services
from gcptui.tui.curves.screen import CurvesScreen


def curve_sources(services: Services, instances: Sequence[Instance]) -> list[tuple[str, ExecChannel]]:
    """(name, exec channel) per machine to plot, in the order given: a row whose workers each run a
    shell is its workers' rows in rank order (a GKE workload stays its own row: its channel is its
    pod's); a machine nothing reaches now is left out."""
    found: list[tuple[str, ExecChannel]] = []
    for instance in instances:
        for machine in _machines(services, instance):
            channel = services.channel_or_none(machine)
            if channel is not None:
                found.append((machine.name, channel))
    return found


def _machines(services: Services, instance: Instance) -> tuple[Instance, ...]:
    pods = services.compute.can(instance, Capability.CONTAINER_LOGS)
    workers = services.compute.of(instance).worker_rows(instance) if instance.workers and not pods else ()
    return workers or (instance,)


def named(services: Services, snapshot: FleetSnapshot | None, names: Sequence[str]) -> list[Instance]:
    """The machines ``names`` stand for in ``snapshot``: fleet rows, or a logs pane's titles
    (``NODE/wN``: that worker's row; ``NAME:SLOT`` and ``NAME:FILE``: the machine ``NAME``)."""
    found: list[Instance] = []
    for name in dict.fromkeys(n.split(":", 1)[0] for n in names):
        row = snapshot.find(name.split("/", 1)[0]) if snapshot is not None else None
        if row is None:
            continue
        if "/" not in name:
            found.append(row)
        else:
            found.extend(w for w in _machines(services, row) if w.name == name)
    return found


def curves_screen(
    services: Services, snapshot: FleetSnapshot | None, names: Sequence[str]
) -> CurvesScreen | None:
    """The curves screen on the machines ``names`` stand for (``named``): their metrics files and
    their run directories' event files; None when none of them can be reached."""
    sources = curve_sources(services, named(services, snapshot, names))
    if not sources:
        return None
    config = services.config
    return CurvesScreen(sources, metrics_path(config.job, config.sync.dest), run_dir=config.sync.dest)
