"""Create VMs like a selected base VM from the TUI: the form, then ``VmCreator`` in a worker thread,
one notification when it is done (the new rows appear with their status at the next refresh).
With a group, the VMs are recorded as a ``[[groups]]`` entry in the config file, as
``vm create --group`` does, and the fleet shows its group row at once."""

from __future__ import annotations

import logging

from textual.app import App

from gcptui.remote.compute.backend import Capability
from gcptui.remote.config import GroupConfig
from gcptui.remote.config.record import record_group, with_group
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance
from gcptui.remote.provision import Created, CreateOptions, zone_unlisted
from gcptui.remote.services import Services
from gcptui.tui.dialogs.create_form import CreateFormScreen, CreateRequest

log = logging.getLogger(__name__)


def start_create(app: App[object], services: Services, base: Instance) -> None:
    """Open the form on ``base``; on Enter, create the VMs in the background."""
    if not services.compute.can(base, Capability.CREATE_LIKE):
        app.notify(
            f"{base.name} is a static host: only GCE VMs can be copied", title="Create", severity="warning"
        )
        return

    def answered(request: CreateRequest | None) -> None:
        if request is not None:
            app.run_worker(lambda: _create(app, services, base, request), thread=True, group="create",
                           exit_on_error=False)  # fmt: skip

    sizes = {group.name: len(group.vms) for group in services.config.groups}
    app.push_screen(CreateFormScreen(base, sizes), answered)


def _create(app: App[object], services: Services, base: Instance, request: CreateRequest) -> None:
    """Make the VMs; one notification says how it went (each VM's steps go to the log: five
    toasts per create stacked over the table while the new rows said the same)."""

    def say(message: str, severity: str = "information") -> None:
        app.call_from_thread(app.notify, message, title="Create", severity=severity, timeout=15)  # type: ignore[arg-type]

    options = CreateOptions(
        zone=request.zone if request.zone != base.zone else None, spot=request.spot, group=request.group
    )
    path = services.config.path
    try:
        unlisted = zone_unlisted(options.zone, services.config)
        if unlisted is not None:
            raise GcptuiError(unlisted)
        if request.group is not None:
            _check_group(services, request.group, request.names)
        backend = services.compute.of(base)
        plan = backend.plan_copies(base, options)
    except GcptuiError as err:
        say(str(err), "error")
        return
    creator = backend.copier(lambda name, step: log.info("create %s: %s", name, step))
    results = creator.create_many(plan, request.names)
    made = [name for name, result in results.items() if isinstance(result, Created)]
    lines = [f"{len(made)}/{len(request.names)} created like {base.name} in {plan.zone}"]
    for name, result in results.items():
        if not isinstance(result, Created):
            lines.append(f"{name}: {result}")
        elif not result.pinned:
            lines.append(f"{name}: no host key published yet: `gcptui ssh accept {name}` to trust it")
    severity = "information" if len(made) == len(request.names) else "warning" if made else "error"
    if request.group is not None and path is not None and made:
        nodes = [name for name in request.names if name in made]
        try:
            config = record_group(path, request.group, nodes)
        except (GcptuiError, OSError) as err:
            lines.append(f"group {request.group} not recorded in {path}: {err}")
            severity = "error"
        else:
            app.call_from_thread(_show_groups, app, services, config.groups)
            lines.append(
                f"group {request.group}: {', '.join(nodes)} recorded in {path} (s on its row starts it)"
            )
    say("\n".join(lines), severity)
    refresh = getattr(app, "refresh_fleet", None)
    if refresh is not None:
        app.call_from_thread(refresh)


def _check_group(services: Services, group: str, names: list[str]) -> None:
    """Before any VM is made: the config file must exist and stay valid with the group, and no VM
    may have the group's name."""
    path = services.config.path
    if path is None:
        raise GcptuiError(f"group {group}: groups are recorded in gcptui.toml and there is none")
    with_group(path.read_text(encoding="utf-8"), path, group, names)
    if services.fleet.snapshot().find(group) is not None:
        raise GcptuiError(f"group {group}: a VM has that name: pick another group name")


def _show_groups(app: App[object], services: Services, groups: list[GroupConfig]) -> None:
    """The recorded groups, seen at once by the fleet table and by group job actions."""
    services.config.groups[:] = groups  # the app's config is this same object
    show = getattr(app, "show_groups", None)
    if show is not None:
        show(groups)
