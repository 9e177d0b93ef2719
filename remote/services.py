"""The services one process shares: the fleet, one SSH pool, the job runner.

The CLI and the TUI are two faces over this one object, so both act identically.
"""

from __future__ import annotations

import asyncio

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.config import Config
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.models import ConnectionGetter, Instance
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget, target_for
from gcptui.remote.sync import SyncSession


class Services:
    """Build once per process with the loaded config; ``await close()`` at the end."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.fleet = FleetSource(config)
        self.pool = SshPool(config.ssh, host_keys=self._published_host_keys)
        self.jobs = JobRunner.from_config(self.pool, config)

    async def _published_host_keys(self, target: SshTarget) -> list[str]:
        """A GCE VM's host keys from its ``hostkeys/`` guest attributes (none when they are off)."""
        if self.config.gcp is None or target.zone is None:
            return []
        try:
            return await asyncio.to_thread(self.fleet.gce().guest_host_keys, target.name, target.zone)
        except GcptuiError:
            return []  # the explicit `gcptui ssh accept` stays the way in

    def target(self, instance: Instance) -> SshTarget:
        return target_for(self.config, instance)

    def target_or_none(self, instance: Instance) -> SshTarget | None:
        """The SSH target, or None when the machine cannot be reached (no address, bad settings)."""
        try:
            return self.target(instance)
        except GcptuiError:
            return None

    def getter(self, instance: Instance) -> ConnectionGetter:
        return self.pool.getter(self.target(instance))

    def sync_session(self, instance: Instance) -> SyncSession:
        """A live-sync session of ``[sync]`` to one machine over the shared pool."""
        sync = self.config.sync
        return SyncSession(
            self.config.resolve_local(sync.source),
            sync.dest,
            self.getter(instance),
            exclude=sync.exclude,
            protect=sync.protect,
            name=instance.name,
        )

    async def resolve(self, names: list[str]) -> list[Instance]:
        """Instances by name (one fleet listing, off the event loop); unknown names are one error."""
        return await asyncio.to_thread(self.fleet.resolve, names)

    async def reachable(self) -> list[Instance]:
        """Every machine SSH could reach now: running VMs and the static hosts."""
        snapshot = await asyncio.to_thread(self.fleet.snapshot)
        return [i for i in snapshot.instances if i.source == "host" or i.status == "RUNNING"]

    async def close(self) -> None:
        await self.pool.close()
