"""What the fleet screen asks of the app that owns the services: the screen only picks machines."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from gcptui.remote.compute.backend import Capability
from gcptui.remote.models import Instance


class FleetActions(Protocol):
    """What the fleet screen asks of the app that owns the services (the screen only picks machines)."""

    def refresh_fleet(self) -> None: ...

    def act(
        self, label: str, instance: Instance, action: Callable[[Instance], Awaitable[str | None]]
    ) -> None: ...

    def act_all(
        self, label: str, instances: list[Instance], action: Callable[[Instance], Awaitable[str | None]]
    ) -> None:
        """``act`` on every instance at once, its results folded into one notification."""
        ...

    def can(self, instance: Instance, capability: Capability) -> bool:
        """What the row's kind of compute lets it do (``CLOUD_LOGS``: its logs come from Cloud
        Logging; ``CANCEL``: ``K`` cancels its job)."""
        ...

    async def job_action(self, action: str, instance: Instance) -> str | None: ...

    async def group_job_action(self, action: str, group: str) -> str | None:
        """``job ACTION GROUP``: the action on every node of a ``[[groups]]`` entry."""
        ...

    async def vm_action(self, action: str, instance: Instance) -> str | None: ...

    def toggle_sync(self, instance: Instance) -> bool: ...

    def toggle_keepalive(self, instance: Instance) -> None: ...

    def toggle_autostop(self, instance: Instance) -> None: ...

    def relaunch_now(self, instance: Instance) -> None: ...

    def show_timeline(self, instance: Instance) -> None: ...

    def pull_run_dir(self, instance: Instance) -> None: ...

    def open_shell(self, instance: Instance) -> None: ...

    def create_from(self, instance: Instance) -> None: ...

    def open_logs(self, names: list[str]) -> None: ...

    def open_group_logs(self, group: str, names: list[str]) -> None:
        """Every node's log of a group (``names``: its nodes in the fleet)."""
        ...

    def open_sweep(self) -> None: ...

    def open_curves(self, names: list[str]) -> None:
        """The curves screen on the machines ``names``."""
        ...

    def cancel_autostop(self, name: str) -> None:
        """The user pressed a key on ``name``: an auto-stop countdown on it is cancelled."""
        ...

    @property
    def keymap(self) -> dict[str, str]:
        """The user's ``[keys]`` overrides (action id -> keys)."""
        ...
