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
from typing import Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.keeper.project_keys import KEY_COMMENT
from gcptui.remote.models import SWEEP_LABEL, Instance
from gcptui.remote.services import Services

ATTEMPTS = 5


def watched_at_start(row: Instance) -> bool:
    """What a keeper watching every Spot VM watches: GCE Spot VMs, a sweep's left to the sweep."""
    return row.source == "gce" and row.spot and SWEEP_LABEL not in row.labels


def key_entry(user: str, public: str) -> str:
    """One ``ssh-keys`` line, as GCE's guest agent reads it: ``USER:TYPE BASE64 COMMENT``."""
    return f"{user}:{' '.join(public.split()[:2])} {KEY_COMMENT}"


def _client(services: Services) -> tuple[Any, Any, str]:
    from google.cloud import compute_v1

    gce = services.fleet.gce()
    endpoint = services.config.gcp.api_endpoint if services.config.gcp is not None else ""
    options = {"api_endpoint": endpoint} if endpoint else None
    return (
        compute_v1,
        compute_v1.InstancesClient(credentials=gce.credentials, client_options=options),
        gce.project,
    )


def _change(services: Services, name: str, zone: str, edit: Callable[[list[str]], list[str] | None]) -> bool:
    """Apply ``edit(lines) -> lines | None`` to instance ``name``'s ``ssh-keys``; False: nothing changed."""
    from google.api_core import exceptions as api

    compute_v1, instances, project = _client(services)
    for _ in range(ATTEMPTS):
        try:
            current = instances.get(project=project, zone=zone, instance=name).metadata
            items = {item.key: item.value for item in current.items}
            lines = [line for line in items.get("ssh-keys", "").splitlines() if line.strip()]
            changed = edit(lines)
            if changed is None:
                return False
            items["ssh-keys"] = "\n".join(changed)
            metadata = compute_v1.Metadata(
                fingerprint=current.fingerprint,
                items=[compute_v1.Items(key=k, value=v) for k, v in items.items()],
            )
            instances.set_metadata(
                project=project, zone=zone, instance=name, metadata_resource=metadata
            ).result()
            return True
        except api.PreconditionFailed:
            continue  # someone else changed its metadata meanwhile: read it again
        except api.GoogleAPICallError as err:
            raise GcptuiError(
                f"cannot change {name}'s ssh-keys metadata ({err.code}): the account needs "
                "compute.instances.setMetadata (roles/compute.instanceAdmin.v1)"
            ) from None
    raise GcptuiError(f"{name}'s metadata kept changing: try again")


def add_instance_key(services: Services, instance: Instance, entry: str) -> bool:
    """Authorize ``entry`` on ``instance`` alone; False when it already was."""
    return _change(
        services, instance.name, instance.zone, lambda lines: None if entry in lines else [*lines, entry]
    )


def remove_instance_keys(services: Services, instance: Instance) -> bool:
    """Remove every key the keeper added (comment ``gcptui-keeper``) from ``instance``."""

    def edit(lines: list[str]) -> list[str] | None:
        kept = [line for line in lines if not line.endswith(" " + KEY_COMMENT)]
        return None if kept == lines else kept

    return _change(services, instance.name, instance.zone, edit)


def remove_everywhere(services: Services) -> tuple[list[str], list[str]]:
    """Take the keeper's keys off every GCE VM of the project: (names changed, one line per failure)."""
    changed: list[str] = []
    failures: list[str] = []
    for row in services.fleet.snapshot().instances:
        if row.source != "gce":
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
        todo = [r for r in rows if r.source == "gce" and r.instance_id and r.instance_id not in self.keyed
                and self.watched(r)]  # fmt: skip
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
