"""The services one process shares: the fleet, one SSH pool, the job runner.

The CLI and the TUI are two faces over this one object, so both act identically.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gcptui.remote.cloud.fleet import FleetSnapshot, FleetSource
from gcptui.remote.compute.backend import SHARED_FLEET, BackendContext, Unsupported
from gcptui.remote.compute.exec_channel import ExecChannel, Reach
from gcptui.remote.compute.registry import Compute
from gcptui.remote.compute.ssh_exec import SshExecChannel, pool_reach
from gcptui.remote.config import Config
from gcptui.remote.errors import CloudError, ConfigError, GcptuiError, NotFoundError
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.jobs.watch_hub import JobWatches
from gcptui.remote.models import Instance, State
from gcptui.remote.ssh.errors import SshConfigError, SshError, SshUnreachableError
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget
from gcptui.remote.sync import BatchApplied, SyncEvent, SyncSession
from gcptui.remote.sync.fanout import RELAY_FAN, FanOut, relay_parents
from gcptui.remote.sync.secrets import SecretGuard, own_key_copies

if TYPE_CHECKING:
    import asyncssh

# A getter that lost its machine re-reads the fleet at most this often (one listing shared by all).
FLEET_REREAD_SECONDS = 2.0


def down_error(instance: Instance) -> SshUnreachableError | None:
    """The one-line error for a machine that is down or stopping (None when SSH may reach it)."""
    if instance.state.down or instance.state is State.STOPPING:
        return SshUnreachableError(
            instance.name, f"{instance.name} is {instance.status}: `gcptui vm start {instance.name}`"
        )
    return None


class Services:
    """Build once per process with the loaded config; ``await close()`` at the end."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.fleet = FleetSource(config)
        self.pool = SshPool(config.ssh, host_keys=self._published_host_keys)
        self.jobs = JobRunner.from_config(config)
        self.job_watches = JobWatches()  # one job watch per machine, for the TUI and keep-alive alike
        self._instances: dict[str, Instance] = {}  # the latest fleet reading, by name
        self._read_at = 0.0  # time.monotonic() of that reading
        self._reading: asyncio.Lock | None = None
        self._source_checked: Path | None = None  # the sync source found free of private keys
        # Told of every batch any sync session of this process lands (live sync, keep-alive's barrier
        # after a recreation, a job start's sync), so "last sync" is the VM's, not one session's.
        self.sync_batch_listeners: list[Callable[[BatchApplied], None]] = []
        self._compute: Compute | None = None
        self.fleet.more_rows = lambda: self.compute.rows_beyond_fleet()

    @property
    def compute(self) -> Compute:
        """The configured backends (``gcptui.remote.compute``), built on first use."""
        if self._compute is None:
            context = BackendContext(
                self.config, connect=self.exec_channel, shared={SHARED_FLEET: self.fleet}
            )
            self._compute = Compute.from_context(context)
        return self._compute

    def channel(self, instance: Instance) -> ExecChannel:
        """How jobs, sync, logs and telemetry run processes on ``instance``: its backend's exec
        channel (SSH through the shared pool for VMs, hosts and TPU workers, following the machine
        across restarts; Kubernetes exec for a pod). Raises ``Unsupported`` for a row with no shell."""
        return self.compute.of(instance).exec_channel(instance)

    def reach(self, instance: Instance) -> Reach:
        """``instance`` for a job operation: over SSH exactly the address this ``Instance`` names (a
        restarted VM's new one, before the next fleet reading), as ``target`` does; a row without
        sshd (a pod) through its backend's ``channel``. Raises ``Unsupported`` for a row with no shell."""
        try:
            self.compute.of(instance).ssh_target(instance)  # pure; before OS Login, which is SSH's
        except Unsupported:
            return Reach(instance.name, self.channel(instance))
        return pool_reach(self.pool, self.target(instance))

    def channel_or_none(self, instance: Instance) -> ExecChannel | None:
        """``channel(instance)``, or None when nothing reaches it now: an SSH machine without an
        address or with bad settings (``target`` fails), a row without a shell."""
        try:
            self.reach(instance)  # pure: checks the SSH target (or the pod's channel) before any use
            return self.channel(instance)
        except GcptuiError:
            return None

    def exec_channel(self, instance: Instance) -> SshExecChannel:
        """An exec channel over the shared SSH pool that follows ``instance`` across restarts."""
        getter = self.follow(instance)
        return SshExecChannel(getter, lambda: getter.where)

    def note_snapshot(self, snapshot: FleetSnapshot) -> None:
        """Remember the fleet as last read: getters from ``follow`` use the newest address."""
        self._instances.update({i.name: i for i in snapshot.instances})
        self._read_at = time.monotonic()

    def latest(self, name: str) -> Instance | None:
        """The machine ``name`` as the fleet last reported it."""
        return self._instances.get(name)

    async def reread(self, name: str, max_age: float = FLEET_REREAD_SECONDS) -> Instance | None:
        """The machine as the fleet reports it now (one listing shared by every caller, at most
        every ``max_age`` seconds); the previous reading when the listing fails."""
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:
            if time.monotonic() - self._read_at >= max_age:
                try:
                    self.note_snapshot(await asyncio.to_thread(self.fleet.snapshot))
                except GcptuiError:
                    self._read_at = time.monotonic()  # an API hiccup: keep the last reading a while
        return self._instances.get(name)

    def follow(self, instance: Instance) -> FollowingGetter:
        """A ``ConnectionGetter`` that follows the machine by name across restarts (new addresses)."""
        self._instances.setdefault(instance.name, instance)
        return FollowingGetter(self, instance.name)

    async def _published_host_keys(self, target: SshTarget) -> list[str]:
        """The host keys the provider publishes for the machine ``target`` reaches (a GCE VM's
        ``hostkeys/`` guest attributes; none when they are off). Only a target with a zone asks: a
        backend that names its own host key alias pins its keys itself (``ssh/target.py``)."""
        if target.zone is None:
            return []
        # The row as last read; one not read yet stands in by name and zone (a VM's target, as above).
        row = self._instances.get(target.name) or Instance(name=target.name, zone=target.zone, status="")
        try:
            return await asyncio.to_thread(self.compute.of(row).published_host_keys, row)
        except GcptuiError:
            return []  # the explicit `gcptui ssh accept` stays the way in

    def target(self, instance: Instance) -> SshTarget:
        """How to reach ``instance`` over SSH (as its OS Login user where its kind uses OS Login and
        it is on)."""
        backend = self.compute.of(instance)
        try:
            # Pure, as reach() promises: the project's setting as already read, never a credential
            # lookup (a machine listed from a snapshot must not need Google credentials to be tried).
            user = self.fleet.login_user(instance) if backend.uses_os_login() else None
        except CloudError as err:
            raise SshConfigError(instance.name, str(err)) from None
        return backend.ssh_target(instance, user)

    def target_or_none(self, instance: Instance) -> SshTarget | None:
        """The SSH target, or None when the machine cannot be reached (no address, bad settings)."""
        try:
            return self.target(instance)
        except GcptuiError:
            return None

    def sync_source(self) -> Path:
        """The local folder sync sends, checked once: refused (one line naming the file) when it
        holds the config's SSH private key (other credentials are held back by ``sync_guard``)."""
        source = self.config.sync_source()
        if self._source_checked != source:
            if not source.is_dir():
                raise ConfigError(f"[sync].source {source} is not a folder: set [sync].source in the config")
            sync = self.config.sync
            # Only the own SSH key refuses the whole folder; other secrets are held back one by one.
            found = own_key_copies(
                source, exclude=sync.exclude, allow=sync.allow_secrets, own_key=self._ssh_key()
            )
            if found:
                raise ConfigError(
                    f"refusing to sync {source}: it holds your SSH private key ([ssh] key), {source / found[0]}: "
                    "set [sync].source to your project, or exclude the file"
                )
            self._source_checked = source
        return source

    def _ssh_key(self) -> Path | None:
        return self.config.resolve_local(self.config.ssh.key) if self.config.ssh.key else None

    def sync_guard(self) -> SecretGuard:
        """The credentials check every file a sync session sends passes (remote/sync/secrets.py)."""
        return SecretGuard(allow=self.config.sync.allow_secrets, own_key=self._ssh_key())

    def sync_line(self, instance: Instance) -> str:
        """What sync does, for the CLI and the TUI: ``LOCAL_SOURCE → NAME:DEST``."""
        return f"{self.config.sync_source()} → {instance.name}:{self.config.sync.dest}"

    def sync_relay(self, seed: Instance) -> FanOut | None:
        """A fan-out relay seeded on ``seed`` (fanout.py): other machines fetch the tree's bytes
        from it at its internal address. None when it has none (a static host) or cannot be reached
        (no shell, or over SSH no address)."""
        if not seed.internal_ip:
            return None
        try:
            channel = self.channel(seed)
        except GcptuiError:
            return None
        if isinstance(channel, SshExecChannel) and self.target_or_none(seed) is None:
            return None
        sync = self.config.sync
        return FanOut(channel, sync.dest, seed.internal_ip, guard=self.sync_guard(), name=seed.name)

    def sync_fanout(self, instances: list[Instance]) -> FanOut | None:
        """The relay that lets several machines share one upload of the tree: the first that can
        seed it. None for one machine, or when none can (each then gets its own copy)."""
        if len(instances) < 2:
            return None
        return next((r for r in map(self.sync_relay, instances) if r is not None), None)

    def sync_sessions(
        self, instances: list[Instance], fan: int = RELAY_FAN
    ) -> tuple[list[SyncSession], FanOut | None]:
        """Sessions of ``[sync]`` to several machines (in their order), fanned out when they can be:
        a tree of relays past ``1 + fan`` machines, each serving ``fan`` (fanout.py; close the
        returned seed's relay, which closes its branches, after the sessions)."""
        relay = self.sync_fanout(instances)
        if relay is None:
            return [self.sync_session(i) for i in instances], None
        order = sorted(instances, key=lambda i: i.name != relay.name)  # the seed first
        relays: dict[int, FanOut] = {0: relay}
        via: dict[str, FanOut | None] = {}
        for index, (instance, parent) in enumerate(zip(order, relay_parents(len(order), fan), strict=True)):
            # A parent whose relay could not start: its machines fetch from the seed instead.
            via[instance.name] = None if parent is None else relays.get(parent, relay)
            if index and fan * index + 1 < len(order):  # it serves machines of its own
                branch = self.sync_relay(instance)
                if branch is not None:
                    relays[index] = relay.branch(branch)
        return [self.sync_session(i, relay=via[i.name]) for i in instances], relay

    def sync_session(self, instance: Instance, relay: FanOut | None = None) -> SyncSession:
        """A live-sync session of ``[sync]`` to one machine over its exec channel (``channel``: SSH
        through the shared pool, following the machine across restarts; a pod's Kubernetes exec)
        (``relay``: a large batch's bytes come from the fan-out's seed machine)."""
        sync = self.config.sync
        session = SyncSession(
            self.sync_source(),
            sync.dest,
            self.channel(instance),
            exclude=sync.exclude,
            protect=sync.protect,
            name=instance.name,
            stall_seconds=sync.stall_seconds,
            guard=self.sync_guard(),
            relay=relay,
        )
        session.subscribe(self._on_sync_event)
        return session

    def _on_sync_event(self, event: SyncEvent) -> None:
        if isinstance(event, BatchApplied) and (event.files or event.deleted):
            for listener in self.sync_batch_listeners:
                listener(event)

    async def resolve(self, names: list[str], *, running: bool = False) -> list[Instance]:
        """Instances by name (one fleet listing, off the event loop); an unknown name is a usage
        error (exit 2); with ``running``, a VM that is not running is one error naming the fix."""
        snapshot = await asyncio.to_thread(self.fleet.snapshot)
        self.note_snapshot(snapshot)
        try:
            instances = self.fleet.resolve(names, snapshot)
        except NotFoundError as err:
            raise ConfigError(str(err)) from None
        if running:
            for instance in instances:
                error = down_error(instance)
                if error is not None:
                    raise error
        return instances

    async def machines(self, names: list[str], *, running: bool = False) -> list[Instance]:
        """The machines ``names`` stand for, to run processes on: a row whose workers each run a shell
        (a TPU node) is all of its workers' rows (``NODE/w0``, ``NODE/w1``, ...), ``NODE/wN`` is that
        one; any other name is its own row (see ``resolve``)."""
        found: list[Instance] = []
        rows = await self.resolve([name.split("/", 1)[0] for name in names], running=running)
        for name, row in zip(names, rows, strict=True):
            workers = self.compute.of(row).worker_rows(row) if row.workers else ()
            if not workers:
                if "/" in name:
                    raise ConfigError(
                        f"{row.name} has no worker {name.split('/', 1)[1]!r}: see `gcptui ls --json`"
                    )
                found.append(row)
                continue
            if "/" in name:
                chosen = [w for w in workers if w.name == name]
                if not chosen:
                    known = ", ".join(w.name for w in workers)
                    raise ConfigError(
                        f"{row.name} has no worker {name.split('/', 1)[1]!r} (its workers: {known})"
                    )
                workers = tuple(chosen)
            found.extend(w for w in workers if w.name not in {f.name for f in found})
        for worker in found:
            if worker.parent is not None:
                self._instances[worker.name] = worker  # a getter following it finds it by name
        return found

    async def reachable(self) -> list[Instance]:
        """Every machine SSH could reach now: running VMs and the static hosts."""
        snapshot = await asyncio.to_thread(self.fleet.snapshot)
        return [i for i in snapshot.instances if i.state.reachable]

    async def close(self) -> None:
        await self.job_watches.close()
        await self.pool.close()


class FollowingGetter:
    """A ``ConnectionGetter`` bound to a machine's name, not to an address.

    Each call connects to the newest address the fleet reported (``Services.note_snapshot``); when
    that fails with a retryable error it re-reads the fleet (rate-limited) and, if the machine moved
    (a Spot VM restarted with a new ephemeral IP, a recreated VM), tries the new address at once.
    ``where`` names the address it is on now, for "reconnecting to ADDRESS" messages.
    """

    def __init__(self, services: Services, name: str) -> None:
        self.services = services
        self.name = name

    @property
    def where(self) -> str:
        target = self.services.pool.target(self.name)
        if target is None:
            instance = self.services.latest(self.name)
            target = self.services.target_or_none(instance) if instance else None
        return target.address if target else "?"

    def _target(self, instance: Instance | None) -> SshTarget:
        if instance is None:
            raise SshUnreachableError(self.name, f"{self.name} is no longer in the fleet")
        error = down_error(instance)
        if error is not None:
            raise error
        return self.services.target(instance)

    async def __call__(self) -> asyncssh.SSHClientConnection:
        # The pool's target is the newest anyone asked for (keep-alive connects to a restarted VM
        # before the next fleet refresh): asking for an older one would tear that connection down.
        target = self.services.pool.target(self.name) or self._target(self.services.latest(self.name))
        try:
            return await self.services.pool.connection(target)
        except SshError as err:
            if not err.retryable:
                raise
            fresh = self._target(await self.services.reread(self.name))
            if fresh == target:
                raise
            return await self.services.pool.connection(fresh)
