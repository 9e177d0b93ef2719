"""The keeper's SSH key in the ``ssh-keys`` metadata of each VM it watches, never the project's: the
key opens those VMs and no other (GCE's guest agent authorizes an instance's own keys beside the
project's). Deploy puts it on the VMs watched then; the keeper itself on each VM it starts watching
later (``KeyPlanter``: its service account may set instance metadata); ``keeper remove`` takes it off
every VM. Each change is made with the instance's metadata fingerprint: a concurrent change (412) is
read again and retried, never overwritten. Where OS Login is on, metadata keys do not count."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gcptui.remote.compute.backend import Capability
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keeper.project_keys import KEY_COMMENT
from gcptui.remote.models import SWEEP_LABEL, Instance
from gcptui.remote.services import Services


def watched_at_start(services: Services, row: Instance) -> bool:
    """What a keeper watching every Spot VM watches: Spot VMs that hold keys of their own, a sweep's
    left to the sweep."""
    return row.spot and SWEEP_LABEL not in row.labels and services.compute.can(row, Capability.INSTANCE_KEYS)


def key_entry(user: str, public: str) -> str:
    """One ``ssh-keys`` line, as GCE's guest agent reads it: ``USER:TYPE BASE64 COMMENT``."""
    return f"{user}:{' '.join(public.split()[:2])} {KEY_COMMENT}"


def add_instance_key(services: Services, instance: Instance, entry: str) -> bool:
    """Authorize ``entry`` on ``instance`` alone; False when it already was."""
    return services.compute.of(instance).edit_ssh_keys(
        instance, lambda lines: None if entry in lines else [*lines, entry]
    )


def remove_instance_keys(services: Services, instance: Instance) -> bool:
    """Remove every key the keeper added (comment ``gcptui-keeper``) from ``instance``."""

    def edit(lines: list[str]) -> list[str] | None:
        kept = [line for line in lines if not line.endswith(" " + KEY_COMMENT)]
        return None if kept == lines else kept

    return services.compute.of(instance).edit_ssh_keys(instance, edit)


def remove_everywhere(services: Services) -> tuple[list[str], list[str]]:
    """Take the keeper's keys off every VM of the project: (names changed, one line per failure)."""
    changed: list[str] = []
    failures: list[str] = []
    for row in services.fleet.snapshot().instances:
        if not services.compute.can(row, Capability.INSTANCE_KEYS):
            continue
        try:
            if remove_instance_keys(services, row):
                changed.append(row.name)
        except GcptuiError as err:
            failures.append(str(err))
    return changed, failures


class KeyPlanter:
    """A ``KeepAlive.on_poll`` listener for the keeper: its key onto each watched GCE VM it has not
    keyed yet (one instance id at a time; a VM made anew has a new id and is keyed again)."""

    def __init__(self, services: Services, watched: Callable[[Instance], bool], entry: str,
                 say: Callable[[str], None]) -> None:  # fmt: skip
        self.services = services
        self.watched = watched
        self.entry = entry
        self.say = say
        self.keyed: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, rows: list[Instance]) -> None:
        if self._task is not None and not self._task.done():
            return  # the previous round is still at it: the next poll looks again
        todo = [r for r in rows if r.instance_id and r.instance_id not in self.keyed and self.watched(r)
                and self.services.compute.can(r, Capability.INSTANCE_KEYS)]  # fmt: skip
        if todo:
            self._task = asyncio.get_running_loop().create_task(self._plant(todo))

    async def _plant(self, rows: list[Instance]) -> None:
        for row in rows:
            try:
                added = await asyncio.to_thread(add_instance_key, self.services, row, self.entry)
            except GcptuiError as err:
                self.say(f"keeper: {err}")
                continue
            self.keyed.add(str(row.instance_id))
            if added:
                self.say(f"keeper: its SSH key added to {row.name}'s ssh-keys metadata")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
