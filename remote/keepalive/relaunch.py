"""Bring a preempted row's job back: reach its (new) machines, sync barrier, the resume command.

``JobLauncher(services).relaunch`` is the callable ``KeepAlive`` takes: one machine's job, or one job
over the row's ranked members (``worker_rows(row)``: a TPU node's workers, a workload's pods), each
given its rank by ``WorkerJobRunner``. It reads the job's metrics
file (the progress protocol of docs/REFERENCE.md) before and after the restart, so it can say the last step
the job logged before it stopped and the step it resumed from: the ``steps lost`` of the timeline.
``GroupLauncher`` does the same for a ``[[groups]]`` node as a group: a node's preemption stops
the other nodes' jobs at once (``job kill``: SIGTERM, so their ranks leave the collective the lost
node left hanging and save); its return syncs it and restarts every node with ``[job].resume``
through ``run_group`` (rendezvous check first), reading where rank 0 resumed from node 0's metrics.
``build_keepalive`` wires the one ``KeepAlive`` to the shared ``Services`` of the CLI or the TUI.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gcptui.remote.compute.exec_channel import Reach, run_capped
from gcptui.remote.config import GroupConfig
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.group import GroupJobRunner
from gcptui.remote.jobs.group_control import run_group
from gcptui.remote.jobs.protocol import GROUP_STOP, JobStatus, metrics_path
from gcptui.remote.jobs.runner import HostResult, JobRunner, gather_hosts
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.job_ledger import JobLedger
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent, ResumePoint, StepReporter
from gcptui.remote.models import Instance, State
from gcptui.remote.services import down_error
from gcptui.remote.ssh.capped import exec_capped
from gcptui.remote.telemetry.progress import json_records

if TYPE_CHECKING:
    from gcptui.remote.keepalive.lease_gate import LeaseGate
    from gcptui.remote.services import Services

# Prints the file's size, then its last lines; "0" alone when there is none. $1 is relative to $HOME.
_TAIL = (
    'f=$1; case $f in /*) ;; *) f="$HOME/$f" ;; esac; '
    'if [ -f "$f" ]; then wc -c < "$f"; tail -n "$2" "$f" | cut -b 1-65536; else echo 0; fi'
)
# Prints the file's size, then (at most $3 bytes of) what follows byte offset $2.
_FROM = (
    'f=$1; case $f in /*) ;; *) f="$HOME/$f" ;; esac; '
    '[ -f "$f" ] || { echo 0; exit 0; }; wc -c < "$f"; tail -c +"$(($2 + 1))" "$f" | head -c "$3"'
)
MAX_TAIL_BYTES = 16 << 20  # what the laptop reads of either, whatever the VM sends


def _size(line: str) -> int:
    """``wc -c``'s answer; 0 when it is not one (ASCII digits: ``int("²")`` raises)."""
    text = line.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else 0


@dataclass(frozen=True, slots=True)
class MetricsMark:
    """Where the metrics file stood before a restart: its size and the last step logged."""

    offset: int
    last_step: int | None


def _step(record: dict[str, object]) -> int | None:
    value = record.get("step")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def last_step_logged(lines: Iterable[str]) -> int | None:
    """The furthest step the latest run reached: progress lines and ``preempted``/``checkpoint`` events
    after its last ``resumed`` event (steps before a resume were rewound by it), or after a progress
    line whose step went back without one (a fresh run started over: the earlier run's steps are not
    this run's to lose)."""
    last: int | None = None
    progress: int | None = None  # the step of the latest progress line (or resume)
    for record in json_records(lines):
        step, event = _step(record), record.get("event")
        if event == "resumed":
            last = progress = step
        elif step is not None and event in (None, "preempted", "checkpoint", "finished"):
            if event is None:
                if progress is not None and step < progress:
                    last = None
                progress = step
            last = step if last is None else max(last, step)
    return last


def resumed_step(lines: Iterable[str]) -> tuple[bool, int | None]:
    """From the lines a restarted job wrote: (known, step). A ``resumed`` event gives its step; a
    progress line without one first means a fresh start (step 0); nothing yet is (False, None)."""
    for record in json_records(lines):
        if record.get("event") == "resumed":
            return True, _step(record)
        if record.get("event") is None and _step(record) is not None:
            return True, 0
    return False, None


def killed_by_user_since(before: JobStatus, now: JobStatus) -> bool:
    """``now`` is a user's kill (no keep-alive marker) of a job started after ``before`` was read."""
    started = (now.started_at, now.pid) != (before.started_at, before.pid)
    return now.state == "killed" and now.detail is None and started


class JobLauncher:
    """Relaunches ``[job].resume`` on a restarted VM over the shared services.

    ``resume_timeout`` bounds the wait for the job's first ``resumed`` or progress line after it
    started (a trainer imports torch first); past it the relaunch succeeds with the step unknown.
    """

    def __init__(self, services: Services, *, jobs: JobRunner | None = None, resume_timeout: float = 120.0,
                 sync_timeout: float = 600.0, tail_lines: int = 400) -> None:  # fmt: skip
        self.services = services
        # The runner that restarts the job (a sweep's TrialJobRunner resumes the VM's trial instead).
        self.jobs = jobs or services.jobs
        self.resume_timeout = resume_timeout
        self.sync_timeout = sync_timeout
        self.tail_lines = tail_lines
        # The job's record as each relaunch in flight first read it, by (machine, its last start).
        self._before: dict[tuple[str, str | None, str], JobStatus] = {}

    @property
    def metrics_file(self) -> str:
        config = self.services.config
        return metrics_path(config.job, config.sync.dest)

    def _home(self) -> str:
        home = self.jobs.remote_home
        return f"HOME={shlex.quote(home)}; export HOME; " if home else ""

    async def relaunch(self, instance: Instance, report: StepReporter | None = None) -> ResumePoint:
        """SSH to ``instance``'s (new) address, sync, restart the job; returns where it resumed.

        Raises ``GcptuiError`` (SSH not up yet, sync failed, ...): ``KeepAlive`` retries with backoff.
        """
        say: StepReporter = report or (lambda _kind, _detail: None)
        members = self.services.compute.of(instance).worker_rows(instance)
        if not members:
            return await self.relaunch_members([instance], say)
        return await self.ranked(instance.name, members).relaunch_members(members, say)

    def ranked(self, row: str, members: Sequence[Instance]) -> JobLauncher:
        """This launcher with a runner that gives each of ``members`` its rank and the others'
        addresses (``[job]`` on a TPU node's workers, a workload's pods)."""
        runner = WorkerJobRunner(self.services.config, remote_home=self.jobs.remote_home)
        runner.prepare(row, members)
        launcher = JobLauncher(self.services, jobs=runner, resume_timeout=self.resume_timeout,
                               sync_timeout=self.sync_timeout, tail_lines=self.tail_lines)  # fmt: skip
        launcher._before = self._before  # one per relaunch: its retries share what it first read
        return launcher

    async def relaunch_members(
        self,
        members: Sequence[Instance],
        say: StepReporter,
        fence: Callable[[], Awaitable[None]] | None = None,
    ) -> ResumePoint:
        """The relaunch every recovery makes, over one machine's job or one job across ranked members
        (a TPU node's workers, worker 0 first, whose metrics tell the step): reach each, sync each,
        stop what may still run, mark the first's metrics, ``fence`` (the lease: the last moment before
        a start two actors must not both make), restart on all at once, read where the first resumed.
        ``self.jobs`` restarts each member's own job (``WorkerJobRunner`` gives each worker its rank).

        ``GcptuiError`` (a member not up yet, a failed sync or restart): the caller retries."""
        services = self.services
        if not members:
            raise GcptuiError("no machine up yet to relaunch the job on")
        targets = [services.reach(m) for m in members]  # from the fresh rows: their new addresses
        # Reach each once before the sync (over SSH the pool replaces a slot whose address changed):
        # the timeline's "connected" means a command runs there.
        for target in targets:
            probe = await run_capped(target.channel, "true")  # capped and timed: the VM's output is its own
            if probe.exit_status is not None and not probe.ok:  # None: its output was cut at the cap
                raise GcptuiError(f"{target.name} does not run commands yet (exit {probe.exit_status})")
        say("connected", ", ".join(t.channel.where for t in targets))
        one = len(members) == 1
        # The sync first: when it fails, a job still running (a relaunch asked for by hand) is left
        # running, as it was. That job is then stopped before the mark: else the lines it writes
        # until the restart's kill (its last steps, its checkpoint on SIGTERM) would be read as the
        # new job's, a fresh start from step 0. After a preemption nothing runs.
        await asyncio.gather(*(self.sync_barrier(m) for m in members))
        say(
            "synced",
            "the VM holds the current tree" if one else f"{len(members)} workers hold the current tree",
        )
        # What the job's record said when this relaunch first reached the machine (kept across its
        # retries, per run of the machine): a user's kill of a job started since then is one this
        # relaunch must not undo.
        key = (targets[0].name, members[0].last_start, self.metrics_file)  # a sweep's slots: one each
        before = self._before.setdefault(key, await self.jobs.status(targets[0]))
        # Keep-alive's own stop (marked, as a group's lost node's): a later read can tell it from the user's.
        _raise_first(await gather_hosts(lambda t: self.jobs.kill(t, by=GROUP_STOP), targets))
        mark = await self.mark(targets[0])
        if fence is not None:
            await fence()
        # The last read before the start: the user's kill of the job an earlier attempt of this
        # relaunch started (whose answer was lost: the connection reset) wins over the retry.
        if killed_by_user_since(before, await self.jobs.status(targets[0])):
            self._before.pop(key, None)
            return ResumePoint(nothing="the job was killed by the user during its relaunch")
        started = _raise_first(await self.jobs.run_all("restart", targets))
        self._before.pop(key, None)
        status = started[0]
        say(
            "started",
            f"pid {status.pid}: {status.command or ''}".strip() if one else f"{len(members)} workers",
        )
        step = await self.wait_resumed(targets[0], mark.offset)
        return ResumePoint(step=step, last_step=mark.last_step)

    __call__ = relaunch

    async def job_status(self, instance: Instance) -> JobStatus:
        """The job's state as the restarted machine's disk records it (did it end before the
        preemption?); a row with ranked members: its first's."""
        services = self.services
        members = services.compute.of(instance).worker_rows(instance)
        return await self.jobs.status(services.reach(members[0] if members else instance))

    async def mark(self, host: Reach) -> MetricsMark:
        """The metrics file's size and last step on ``host`` now (before the restart)."""
        script = self._home() + _TAIL
        command = shlex.join(["sh", "-c", script, "tail", self.metrics_file, str(self.tail_lines)])
        # The VM's file: read up to a byte cap, whatever its lines' lengths (json_records skips long ones).
        result = await exec_capped(host.channel, command, max_bytes=MAX_TAIL_BYTES, timeout=30)
        lines = result.stdout.splitlines()
        size = _size(lines[0]) if lines else 0
        return MetricsMark(size, last_step_logged(lines[1:]))

    async def wait_resumed(self, host: Reach, offset: int, poll: float = 0.2) -> int | None:
        """The step the restarted job resumed from, read from what it appended after ``offset``."""
        channel = host.channel
        script = self._home() + _FROM
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.resume_timeout
        while loop.time() < deadline:
            command = shlex.join(["sh", "-c", script, "from", self.metrics_file, str(offset), "1048576"])
            result = await exec_capped(channel, command, max_bytes=MAX_TAIL_BYTES, timeout=30)
            lines = result.stdout.splitlines()
            if lines and _size(lines[0]) < offset:
                offset = 0  # the file was replaced or truncated: read the new one from the start
                continue
            known, step = resumed_step(lines[1:])
            if known:
                return step
            await asyncio.sleep(poll)
        return None

    async def sync_barrier(self, instance: Instance) -> None:
        """The VM holds the current tree (one sync barrier), or ``GcptuiError`` after ``sync_timeout``."""
        session = self.services.sync_session(instance)
        try:
            await session.barrier(timeout=self.sync_timeout)
        except TimeoutError:
            raise GcptuiError(
                f"{instance.name}: sync did not finish within {self.sync_timeout:.0f}s"
            ) from None
        finally:
            await session.close()


@dataclass(frozen=True, slots=True)
class _GroupRelaunch:
    """A group relaunch that succeeded: which node's recovery ran it, each node's start it ran on."""

    by: str
    starts: dict[str, str | None]
    point: ResumePoint

    def covers(self, instance: Instance) -> bool:
        """It restarted the group with this node in its current run (the same start): nothing to redo."""
        return instance.last_start is not None and self.starts.get(instance.name) == instance.last_start


class GroupLauncher(JobLauncher):
    """``JobLauncher`` that relaunches a group's node as the whole group (other VMs as before)."""

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self._stopping: set[asyncio.Task[None]] = set()
        # One group relaunch at a time per group, and what the last one did: nodes preempted together
        # each recover, but the group is restarted once, by whichever node's relaunch comes first.
        self._locks: dict[str, asyncio.Lock] = {}
        self._last: dict[str, _GroupRelaunch] = {}

    def group_of(self, name: str) -> GroupConfig | None:
        return next((g for g in self.services.config.groups if name in g.vms), None)

    def runner(self) -> GroupJobRunner:
        services = self.services
        return GroupJobRunner(services.config, remote_home=self.jobs.remote_home)

    def on_event(self, event: RecoveryEvent) -> None:
        """Keep-alive's listener: a node's preemption stops the rest of its group at once."""
        group = self.group_of(event.name)
        if event.kind != "preempted" or group is None:
            return
        task = asyncio.create_task(self.stop_others(group, event.name))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def stop_others(self, group: GroupConfig, lost: str) -> None:
        """``job kill`` on every other node of ``group`` that SSH reaches (best effort)."""
        others = [name for name in group.vms if name != lost]
        try:
            instances = await self.services.resolve(others)
        except GcptuiError:
            return  # the fleet could not be read: the relaunch's restart of every node still follows
        targets = [self.services.reach(i) for i in instances if down_error(i) is None]
        runner = self.runner()
        # Marked as keep-alive's own (not the user's) kill: if this node is preempted next, its
        # recovery must still bring the group back, not leave it stopped as "killed by the user".
        await gather_hosts(lambda target: runner.kill(target, by=GROUP_STOP), targets)

    async def relaunch(self, instance: Instance, report: StepReporter | None = None) -> ResumePoint:
        group = self.group_of(instance.name)
        if group is None:
            return await super().relaunch(instance, report)
        say: StepReporter = report or (lambda _kind, _detail: None)
        async with self._locks.setdefault(group.name, asyncio.Lock()):
            last = self._last.get(group.name)
            if last is not None and last.covers(instance):
                say(
                    "started",
                    f"group {group.name}: already restarted with this node, by {last.by}'s recovery",
                )
                return last.point
            point, starts = await self._relaunch_group(group, instance, say)
            self._last[group.name] = _GroupRelaunch(instance.name, starts, point)
            return point

    async def _relaunch_group(
        self, group: GroupConfig, instance: Instance, say: StepReporter
    ) -> tuple[ResumePoint, dict[str, str | None]]:
        services = self.services
        instances = await services.resolve(list(group.vms), running=True)  # all nodes up, or retry
        instances = [instance if i.name == instance.name else i for i in instances]
        # RUNNING, not just reachable: a node still STAGING answers SSH before GCE records its start.
        # Restarted then, its own recovery would not find that start covered (and restart the group
        # again), or would read the kill below as the user's and leave the node stopped.
        booting = [i for i in instances if i.state is not State.RUNNING]
        if booting:
            raise GcptuiError(
                f"group {group.name}: {booting[0].name} is {booting[0].status}, not running yet"
            )
        targets = [services.reach(i) for i in instances]
        first = targets[0]  # rank 0 writes the metrics, on node 0
        await run_capped(first.channel, "true")
        say("connected", services.reach(instance).channel.where)
        # The sync first, then nodes still running (a relaunch by hand) stop before the mark: see
        # JobLauncher.relaunch.
        await self.sync_barrier(instance)
        say("synced", "the VM holds the current tree")
        await self.runner().run_all("kill", targets)
        mark = await self.mark(first)
        results = await run_group("restart", self.runner(), group, instances, targets)
        failed = [r for r in results if not r.ok]
        if failed:
            raise failed[0].error or GcptuiError(f"group {group.name}: restart failed")
        say("started", f"group {group.name}: {len(results)} nodes")
        step = await self.wait_resumed(first, mark.offset)
        return ResumePoint(step=step, last_step=mark.last_step), {i.name: i.last_start for i in instances}

    __call__ = relaunch

    async def close(self) -> None:
        for task in list(self._stopping):
            task.cancel()
        await asyncio.gather(*self._stopping, return_exceptions=True)


def _raise_first(results: Sequence[HostResult[JobStatus]]) -> list[JobStatus]:
    """Each member's status, or the first member's error (named) when any failed."""
    failed = [r for r in results if r.error is not None or r.value is None]
    if failed:
        error = failed[0].error
        raise GcptuiError(f"{failed[0].name}: {error}") if len(results) > 1 or error is None else error
    return [r.value for r in results if r.value is not None]


def build_keepalive(
    services: Services,
    *,
    names: Iterable[str] | None = None,
    on_event: Callable[[RecoveryEvent], None] | None = None,
    recover_unwatched: bool = False,
    launcher: JobLauncher | None = None,
    check_jobs: bool = True,
    lease: LeaseGate | None = None,
    **options: float,
) -> KeepAlive:
    """The one ``KeepAlive`` over the services' configured backends (the compute seam) and a
    ``JobLauncher``, with ``[keepalive]``'s ``poll_seconds``, ``max_restarts`` and ``restart_idle``
    (``options`` override any ``KeepAlive`` setting). Job states seen go to the ``JobLedger``, which
    finds VMs stopped while unwatched at start-up; ``recover_unwatched`` recovers those instead of only
    saying so. ``launcher`` relaunches the job (default: ``JobLauncher``, ``GroupLauncher`` with
    ``[[groups]]``); without ``check_jobs`` a restarted VM is never left stopped because its job had
    ended (a sweep decides what runs next)."""
    settings = services.config.keepalive
    listener: Callable[[RecoveryEvent], None] | None = None
    if launcher is None:
        launcher = JobLauncher(services)
        if services.config.groups:
            launcher = group_launcher = GroupLauncher(services)
            listener = group_launcher.on_event
    kwargs: dict[str, float] = {"poll_seconds": settings.poll_seconds, "max_restarts": settings.max_restarts}
    kwargs.update(options)
    keepalive = KeepAlive(services.compute, relaunch=launcher, on_event=on_event,
                          names=names, restart_idle=settings.restart_idle,
                          job_status=launcher.job_status if check_jobs else None,
                          ledger=JobLedger(), failover_after=settings.failover_after, failover_zones=settings.zones,
                          recover_unwatched=recover_unwatched, lease=lease, **kwargs)  # type: ignore[arg-type]  # fmt: skip
    if listener is not None:
        keepalive.subscribe(listener)  # a node's preemption stops the rest of its group
    return keepalive
