"""Background watchers per machine: job state, training progress, GPUs and live sync.

They run as asyncio tasks on the app's loop, write what they learn into ``Live`` records and call
``changed(name)``; the app turns that into one table update. Nothing here touches a widget.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gcptui.remote.aio import cancel_and_wait, report_failure, within
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.exec_channel import ExecChannel, Reach
from gcptui.remote.compute.ssh_exec import pool_reach
from gcptui.remote.errors import GcptuiError
from gcptui.remote.gke_workflows import container_job, container_progress, is_container_job
from gcptui.remote.jobs.protocol import JobStatus, metrics_path
from gcptui.remote.models import FleetSnapshot, Instance
from gcptui.remote.services import Services
from gcptui.remote.sync import BatchApplied, SyncEvent, SyncSession, SyncStateChanged, SyncWarning
from gcptui.remote.sync.fanout import FanOut
from gcptui.remote.telemetry.fold import WorkerFold
from gcptui.remote.telemetry.gpu import GpuHistory, GpuMonitor, GpuSnapshot
from gcptui.remote.telemetry.idle import IdleGpuDetector
from gcptui.remote.telemetry.progress import Progress, follow_progress
from gcptui.tui.live.state import Live

log = logging.getLogger(__name__)

# A watcher that dies of an unexpected error is restarted after RESTART_FIRST_S, doubling up to
# RESTART_MAX_S while it keeps failing; one that ran HEALTHY_S before failing starts over at the first.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 60.0
HEALTHY_S = 60.0

# At most this many machines are watched at once (each holds a connection and three streams);
# benchmarks/fleet_live.py measures the TUI at 64 to 256 (a pod slice's or a team's sweep's worth).
MAX_WATCHED = 256


# How often a running Vertex AI job's logs are read for its progress (one Cloud Logging list each).
LOGGED_PROGRESS_SECONDS = 5.0


class Monitors:
    """Starts watchers for reachable machines (at most ``limit``) and stops them when they go."""

    def __init__(
        self,
        services: Services,
        live: dict[str, Live],
        changed: Callable[[str], None],
        *,
        job_ended: Callable[[str, JobStatus], None] = lambda _n, _s: None,
        gpu_idle: Callable[[str], None] = lambda _n: None,
        sync_warning: Callable[[str, str], None] = lambda _n, _m: None,
        failed: Callable[[str, BaseException], None] | None = None,
        limit: int = MAX_WATCHED,
        sync_by_default: bool = False,
        restart_delay: float = RESTART_FIRST_S,
    ) -> None:
        self.services = services
        self.live = live
        self.changed = changed
        self.job_ended = job_ended
        self.gpu_idle = gpu_idle
        self.sync_warning = sync_warning
        self.failed = failed or self._log_failure
        self.limit = limit
        self.restart_delay = restart_delay
        self.restarts: dict[str, int] = {}  # watcher label -> restarts after unexpected errors
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        # What each watched machine is reached by: (what changes when it moves, its reach).
        self._targets: dict[str, tuple[object, Reach]] = {}
        self.sync_wanted: set[str] = set()
        self.sync_by_default = sync_by_default
        self._sync_refused: set[str] = set()  # turned off by the user: stays off
        self._sync: dict[str, tuple[SyncSession, asyncio.Task[None]]] = {}
        self._jobs_without_shell: dict[str, asyncio.Task[None]] = {}  # Vertex AI jobs: progress from logs
        self._said_local: set[str] = set()  # sync warnings about the local tree, said once for all VMs
        self._relay: FanOut | None = None  # live sync of several VMs: one upload, relayed by the first
        # Rows whose containers' own command may be the training (GKE): as last listed, by name.
        self._container_rows: dict[str, Instance] = {}
        services.sync_batch_listeners.append(self._on_sync_batch)

    def state(self, name: str) -> Live:
        if name not in self.live:
            gpu = self.services.config.gpu
            self.live[name] = Live(idle=IdleGpuDetector(gpu.idle_util_percent, gpu.idle_minutes))
        return self.live[name]

    # -- following the fleet ---------------------------------------------------------------------

    def reconcile(self, snapshot: FleetSnapshot) -> None:
        """Watch what is reachable now; stop watching what is not (its address may change)."""
        wanted = [i for i in snapshot.instances if i.reachable][: self.limit]
        names = {i.name for i in wanted}
        for name in list(self._tasks):
            if name not in names:
                self._stop(name)
        self._watch_logged_progress(snapshot)
        self._container_rows = {
            i.name: i for i in wanted if self.services.compute.can(i, Capability.CONTAINER_LOGS)
        }
        for name, row in self._container_rows.items():
            live = self.live.get(name)
            if live is not None and is_container_job(live.job):  # the pod moved on: so did its job
                live.job = container_job(row)
                self.changed(name)
        for instance in wanted:
            found = self._reach(instance)
            if found is None:
                continue
            known = self._targets.get(instance.name)
            if known is None or known[0] != found[0]:
                # A new address (a restarted VM): the pool reconnects by itself, keep its slot.
                self._stop(instance.name, disconnect=False)
                self._start(instance, found)
            if self.sync_by_default and instance.name not in self._sync_refused:
                self.sync_wanted.add(instance.name)
            if instance.name in self.sync_wanted and instance.name not in self._sync:
                self._start_sync(instance)

    def _watch_logged_progress(self, snapshot: FleetSnapshot) -> None:
        """Vertex AI jobs have no shell: their progress is read from their logs (the trainer's progress
        records on the chief's stdout), polled while they run."""
        if not self.services.config.vertex.regions and not self._jobs_without_shell:
            return  # no [vertex] regions: nothing to poll (and no backend built for it)
        logged = Capability.CLOUD_LOGS  # its progress records are lines in Cloud Logging
        running = {
            i.name: i for i in snapshot.instances if i.state.up and self.services.compute.can(i, logged)
        }
        for name in list(self._jobs_without_shell):
            if name not in running:
                self._jobs_without_shell.pop(name).cancel()
        for name, row in running.items():
            if name not in self._jobs_without_shell:
                self._jobs_without_shell[name] = self._spawn_watcher(
                    f"progress {name}", self._logged_progress(row)
                )

    def _logged_progress(self, row: Instance) -> Callable[[], Coroutine[Any, Any, None]]:
        return lambda: self._poll_logged_progress(row)

    async def _poll_logged_progress(self, row: Instance) -> None:
        from gcptui.remote.vertex_workflows import job_progress

        while True:
            progress = await asyncio.to_thread(job_progress, self.services.compute, row)
            if progress.step is not None:
                self.state(row.name).progress = progress
                self.changed(row.name)
            await asyncio.sleep(LOGGED_PROGRESS_SECONDS)

    def _reach(self, instance: Instance) -> tuple[object, Reach] | None:
        """How the watchers reach ``instance``, and what changes when it moves: its SSH target (a
        new address, user or host key: the same pooled connection as every other use), else its
        channel's ``where`` (a pod). None when nothing reaches it (no address, no shell)."""
        target = self.services.target_or_none(instance)
        if target is not None:
            return target, pool_reach(self.services.pool, target)
        try:
            reach = self.services.reach(instance)
        except GcptuiError:
            return None
        return reach.channel.where, reach

    def _start(self, instance: Instance, found: tuple[object, Reach]) -> None:
        name = instance.name
        self._targets[name] = found
        self.state(name).watched = True
        channel = found[1].channel
        metrics = metrics_path(self.services.config.job, self.services.config.sync.dest)
        self._tasks[name] = [
            self._spawn_watcher(f"job {name}", lambda: self._watch_job(name, channel)),
            self._spawn_watcher(f"progress {name}", lambda: self._watch_progress(name, channel, metrics)),
            *self._gpu_watchers(instance, channel),
        ]
        if self.services.compute.can(instance, Capability.CONTAINER_LOGS):
            self._tasks[name].append(
                self._spawn_watcher(f"containers {name}", lambda: self._watch_container_progress(name))
            )

    def _stop(self, name: str, *, disconnect: bool = True) -> None:
        for task in self._tasks.pop(name, []):
            task.cancel()
        self._targets.pop(name, None)
        if name in self.live:  # what was read from a machine that went away is no longer true
            live = self.live[name]
            live.watched, live.job, live.job_error, live.gpu_idle = False, None, "", False
            live.gpu, live.gpu_spread = GpuHistory(), None
            self.changed(name)
        session = self._sync.pop(name, None)
        if session is not None:
            session[1].cancel()
            self._record_sync(name, "", 0, "")
        if disconnect:  # it stopped: keep the pool from retrying a machine that is gone
            self._spawn(f"disconnect {name}", self.services.pool.disconnect(name))

    def _spawn(self, label: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A background task whose unexpected death is reported (``failed``), never silent."""
        return report_failure(asyncio.get_running_loop().create_task(coro, name=label), self.failed)

    def _spawn_watcher(self, label: str, run: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        """A watcher task that outlives its own bugs: see ``_supervise``."""
        return self._spawn(label, self._supervise(label, run))

    async def _supervise(self, label: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``run()``; when it dies of an unexpected error, report it (``failed``: logged with its
        traceback and shown, once per distinct error) and run it again after a growing delay, so a
        parser bug on one odd line does not leave a column frozen for the rest of the session.
        Expected failures (SSH down, a VM restarting) are handled inside the watchers themselves."""
        pauses = Backoff(self.restart_delay, RESTART_MAX_S)
        told: set[str] = set()
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await run()
                return  # its stream ended on its own
            except Exception as err:  # noqa: BLE001 - a surprise: reported, then the watcher restarts
                if loop.time() - started >= HEALTHY_S:
                    pauses.reset()
                said = f"{type(err).__name__}: {err}"
                if said in told:
                    log.warning("monitor %r failed again (%s); restarting in %.3gs", label, said, pauses.step)
                else:
                    told.add(said)
                    self.failed(label, err)
            await asyncio.sleep(pauses.pause())
            self.restarts[label] = self.restarts.get(label, 0) + 1

    @staticmethod
    def _log_failure(name: str, error: BaseException) -> None:
        log.error("monitor %r failed", name, exc_info=(type(error), error, error.__traceback__))

    # -- the watchers ------------------------------------------------------------------------------

    async def _watch_job(self, name: str, channel: ExecChannel) -> None:
        """Follow the VM's job state as it changes (one long-lived exec, not a poll per VM)."""
        live = self.state(name)
        async for event in self.services.job_watches.watch(channel, name):  # shared with keep-alive's
            if event.kind == "lost":
                live.job_error = event.reason or "connection lost"
            elif event.status is not None:
                live.job, live.job_error = event.status, ""
                row = self._container_rows.get(name)
                if row is not None and event.status.state == "none":
                    # gcptui started no job in the pod: its containers' own command is the training.
                    live.job = container_job(row)
                if event.kind == "ended":
                    self.job_ended(name, event.status)
            self.changed(name)

    async def refresh_job(self, name: str) -> None:
        """Read the job's state now (after the user started or killed it)."""
        known = self._targets.get(name)
        if known is not None:
            with contextlib.suppress(GcptuiError):
                self.state(name).job = await self.services.jobs.status(known[1])
                self.changed(name)

    async def _watch_progress(self, name: str, channel: ExecChannel, path: str) -> None:
        async for item in follow_progress(channel, path):
            if isinstance(item, Progress):
                self.state(name).progress = item
                self.changed(name)

    async def _watch_container_progress(self, name: str) -> None:
        """A GKE workload's progress from its rank 0's output (the log API) while gcptui started no
        job there (a job it started has its metrics file, read by ``_watch_progress``)."""
        row = self._container_rows.get(name)
        if row is None:
            return
        async for progress in container_progress(self.services.compute, row):
            live = self.state(name)
            if live.job is None or is_container_job(live.job):
                live.progress = progress
                self.changed(name)

    def _gpu_watchers(self, instance: Instance, channel: ExecChannel) -> list[asyncio.Task[None]]:
        """One accelerator stream for a machine; one per worker for a node of several hosts (a slice),
        folded into the node's cell (remote/telemetry/fold.py)."""
        name = instance.name
        workers = (
            self.services.compute.of(instance).worker_rows(instance) if len(instance.workers) > 1 else ()
        )
        reaches = []
        for worker in workers:
            try:
                reaches.append(self.services.reach(worker).channel)
            except GcptuiError:
                reaches = []  # a worker without an address yet: worker 0's stream, as before
                break
        if not reaches:
            return [self._spawn_watcher(f"gpu {name}", lambda: self._watch_gpu(name, channel))]
        fold = WorkerFold()
        return [
            self._spawn_watcher(
                f"gpu {worker.name}",
                functools.partial(self._watch_gpu, name, reach, fold=fold, worker=number),
            )
            for number, (worker, reach) in enumerate(zip(workers, reaches, strict=True))
        ]

    async def _watch_gpu(
        self, name: str, channel: ExecChannel, *, fold: WorkerFold | None = None, worker: int = 0
    ) -> None:
        live = self.state(name)
        async for sample in GpuMonitor(channel):
            snapshot: GpuSnapshot = sample
            if fold is not None:  # one of a node's workers: the node's fold, at most once a second
                folded = fold.add(worker, sample)
                if folded is None:
                    continue
                snapshot, live.gpu_spread = folded, fold.spread()
            live.gpu.add(snapshot)
            if live.idle is not None:
                was_idle = live.gpu_idle
                live.gpu_idle = live.idle.update(snapshot, running=True)
                if live.gpu_idle and not was_idle:
                    self.gpu_idle(name)
            self.changed(name)

    # -- live sync ---------------------------------------------------------------------------------

    def toggle_sync(self, instance: Instance) -> bool:
        """Turn live sync on or off for ``instance``; returns the new setting."""
        if instance.name in self.sync_wanted:
            self.sync_wanted.discard(instance.name)
            self._sync_refused.add(instance.name)
            entry = self._sync.pop(instance.name, None)
            if entry is not None:
                entry[1].cancel()
            self._record_sync(instance.name, "", 0, "")
            return False
        self.sync_wanted.add(instance.name)
        self._sync_refused.discard(instance.name)
        if instance.reachable:
            self._start_sync(instance)
        return True

    def _relay_for(self, instance: Instance) -> FanOut | None:
        """The first VM whose live sync starts seeds a relay; VMs started after it fetch large
        batches from it. When the seed's own sync ends its copy goes stale: the others go direct."""
        relay = self._relay
        if relay is not None and relay.name not in self._sync:
            relay.stop(f"live sync to {relay.name} ended")
            relay = self._relay = None
        if relay is None:
            self._relay = self.services.sync_relay(instance)  # for the VMs that start next
            return None
        return relay if relay.name != instance.name else None

    def _open_session(self, instance: Instance) -> SyncSession | None:
        try:
            session = self.services.sync_session(instance, relay=self._relay_for(instance))
        except GcptuiError as err:  # e.g. the source holds a private key: refused, said once
            if self.state(instance.name).sync_state != "error":
                self.sync_warning(instance.name, str(err))
            self._record_sync(instance.name, "error", 0, str(err))
            return None
        session.subscribe(functools.partial(self._on_sync_event, instance.name, session))
        self.state(instance.name).sync_route = self.services.sync_line(instance)
        return session

    def _start_sync(self, instance: Instance) -> None:
        name = instance.name
        first = self._open_session(instance)
        if first is None:
            return
        unused: list[SyncSession] = [first]

        async def run() -> None:
            # A restart after an unexpected error follows with a new session (the old one is closed).
            session = unused.pop() if unused else self._open_session(instance)
            if session is None:
                return
            if name in self._sync:
                self._sync[name] = (session, self._sync[name][1])  # barrier() uses the live one
            await self._follow(name, session)

        task = self._spawn_watcher(f"sync {name}", run)
        self._sync[name] = (first, task)

    async def _follow(self, name: str, session: SyncSession) -> None:
        try:
            await session.follow()
        except GcptuiError as err:
            self._record_sync(name, "error", 0, str(err))
        finally:
            with contextlib.suppress(Exception):
                await session.close()

    def _on_sync_event(self, name: str, session: SyncSession, event: SyncEvent) -> None:
        entry = self._sync.get(name)
        if entry is None or entry[0] is not session:
            # A session this side ended (y, or the VM went): the row already says "off", and the
            # session's last word ("stopped", from its cancellation) must not overwrite it.
            return
        if isinstance(event, SyncStateChanged):
            self._record_sync(name, event.state, event.pending, event.reason)
        elif isinstance(event, SyncWarning) and not (event.local and event.message in self._said_local):
            if event.local:  # about the local tree (a key held back): said once, not once per VM
                self._said_local.add(event.message)
            self.sync_warning(name, event.message)

    def _on_sync_batch(self, event: BatchApplied) -> None:
        """A batch landed on a VM, from any session (live sync here, keep-alive's barrier after a
        recreation, a job start's sync): the VM's "last sync"."""
        if event.name not in self.live:
            return
        live = self.state(event.name)
        live.last_sync_at, live.last_sync_files, live.last_sync_bytes = time.time(), event.files, event.bytes
        self.changed(event.name)

    def _record_sync(self, name: str, state: str, pending: int, reason: str) -> None:
        live = self.state(name)
        live.sync_state, live.sync_pending, live.sync_reason = state, pending, reason
        self.changed(name)

    async def barrier(self, instance: Instance, timeout: float = 600.0) -> None:
        """The VM holds the current tree: through its live session, else one full sync."""
        entry = self._sync.get(instance.name)
        if entry is not None:
            await entry[0].barrier(timeout=timeout)
            return
        session = self.services.sync_session(instance)
        try:
            await within(timeout, session.full_sync(complete=True))
        finally:
            await session.close()

    async def close(self) -> None:
        """Cancel every watcher and wait a bounded while for them to end."""
        tasks = [t for ts in self._tasks.values() for t in ts] + [t for _, t in self._sync.values()]
        tasks += list(self._jobs_without_shell.values())
        self._jobs_without_shell.clear()
        self._tasks.clear()
        self._sync.clear()
        if self._relay is not None:
            self._relay.close()
        await cancel_and_wait(*tasks, timeout=3.0)
