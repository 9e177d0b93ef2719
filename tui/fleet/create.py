"""Create VMs like a selected base VM from the TUI: the form, then ``VmCreator`` in a worker thread,
each VM's steps as notifications (and the new rows appear with their status at the next refresh)."""

from __future__ import annotations

from textual.app import App

from gcptui.remote.cloud.create import CreateOptions
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance
from gcptui.remote.provision import Created, VmCreator, plan_create
from gcptui.remote.services import Services
from gcptui.tui.dialogs.create_form import CreateFormScreen, CreateRequest


def start_create(app: App[object], services: Services, base: Instance) -> None:
    """Open the form on ``base``; on Enter, create the VMs in the background."""
    if base.source != "gce":
        app.notify(
            f"{base.name} is a static host: only GCE VMs can be copied", title="Create", severity="warning"
        )
        return

    def answered(request: CreateRequest | None) -> None:
        if request is not None:
            app.run_worker(lambda: _create(app, services, base, request), thread=True, group="create",
                           exit_on_error=False)  # fmt: skip

    app.push_screen(CreateFormScreen(base), answered)


def _create(app: App[object], services: Services, base: Instance, request: CreateRequest) -> None:
    def say(message: str, severity: str = "information") -> None:
        app.call_from_thread(app.notify, message, title="Create", severity=severity)  # type: ignore[arg-type]

    options = CreateOptions(zone=request.zone if request.zone != base.zone else None, spot=request.spot)
    try:
        gce = services.fleet.gce()
        plan = plan_create(gce, base, options)
    except GcptuiError as err:
        say(str(err), "error")
        return
    say(f"creating {', '.join(request.names)} like {base.name} in {plan.zone}")
    creator = VmCreator(gce, services.config, lambda name, step: say(f"{name}: {step}"))
    results = creator.create_many(plan, request.names)
    made = [name for name, result in results.items() if isinstance(result, Created)]
    failed = {name: result for name, result in results.items() if not isinstance(result, Created)}
    for name, error in failed.items():
        say(f"{name}: {error}", "error")
    say(
        f"{len(made)}/{len(request.names)} created like {base.name}",
        "information" if not failed else "warning",
    )
    refresh = getattr(app, "refresh_fleet", None)
    if refresh is not None:
        app.call_from_thread(refresh)
