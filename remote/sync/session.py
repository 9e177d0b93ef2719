"""``SyncSession``: mirror one local tree to one VM directory, once or while the user edits.

One session per VM. It holds one agent (``vm/sync_agent.py``) started over the machine's exec channel
(SSH through the pool, or a pod's Kubernetes exec), the local manifest, and its picture of the VM
(last listing + every applied result). Full diffs list both
trees (the VM's in one round trip); watched changes re-stat only the paths named, so an edit
reaches the VM in one pipelined round trip. A dropped connection queues changes and ends in a
full diff once the channel reaches the machine again (retried with the project's ``Backoff``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.errors import GcptuiError
from gcptui.remote.ssh.errors import HostKeyError, SshAuthError
from gcptui.remote.sync.agent_client import (
    STALL_TIMEOUT_S,
    TRANSPORT_ERRORS,
    AgentLost,
    AgentRefused,
    RemoteAgent,
)
from gcptui.remote.sync.applier import RemoteView, apply_plan
from gcptui.remote.sync.events import (
    BatchApplied,
    FullSyncProgress,
    ScanProgress,
)
from gcptui.remote.sync.failures import failure_line, incomplete, kept_on_vm
from gcptui.remote.sync.fanout import FanOut
from gcptui.remote.sync.local_tree import LocalScan, scan_tree
from gcptui.remote.sync.plan import Plan, make_plan
from gcptui.remote.sync.rules import PathSet, SyncRules
from gcptui.remote.sync.secrets import FIX, SecretGuard
from gcptui.remote.sync.session_events import SessionEvents
from gcptui.remote.sync.session_plans import Planning
from gcptui.remote.sync.session_view import ViewKeeping
from gcptui.remote.sync.tracker import LocalTracker
from gcptui.remote.sync.watcher import TreeWatcher

# How many times a file that changed while it was read is sent again within one batch.
RESEND_ROUNDS = 5
# How long an apparently emptied source may stay empty before sync refuses to mirror it.
EMPTY_SETTLE_SECONDS = 0.5
# Backoff between failed reconnects while following (doubling from the first to the most).
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0

log = logging.getLogger(__name__)


class SyncError(GcptuiError):
    """Sync stopped; the message says why and what to do."""


class SyncLostError(SyncError):
    """Sync stopped because the VM could not be reached, or went away mid-way (preempted, stopped):
    unlike other ``SyncError``s, this may pass on its own."""


class SyncSession(ViewKeeping, Planning):
    """Mirror ``source`` to ``dest`` on one VM.

    ``dest`` is relative to the remote home unless absolute (``~/x`` is home-relative); the
    VM refuses ``/``, the home and its parents. ``exclude`` adds gitignore-style patterns to the
    tree's own ``.gitignore`` files; ``protect`` names remote paths (gitignore-style, relative to
    dest) that sync never writes or deletes. ``guard`` checks every file about to go (its name and
    the bytes read to send): a private key is held back and named once, the rest syncs.
    """

    def __init__(
        self,
        source: str | os.PathLike[str],
        dest: str,
        channel: ExecChannel,
        *,
        exclude: Iterable[str] = (),
        protect: Iterable[str] = (),
        name: str = "",
        step_ms: int = 10,
        debounce_ms: int = 300,
        reconcile_seconds: float = 30.0,
        stall_seconds: float = STALL_TIMEOUT_S,
        guard: SecretGuard | None = None,
        relay: FanOut | None = None,
    ) -> None:
        self.source = Path(source).expanduser().resolve()
        self.dest = dest
        self.rules = SyncRules(self.source, exclude)
        self.protect = PathSet(protect)
        self.reconcile_seconds = reconcile_seconds
        self.stall_seconds = stall_seconds
        self.guard = guard if guard is not None else SecretGuard()
        self.relay = relay  # fan-out: a large batch's bytes come from the seed VM (fanout.py)
        self.view = RemoteView()
        self.channel = channel
        self._agent: RemoteAgent | None = None
        self._lock = asyncio.Lock()  # one exchange with the agent at a time
        SessionEvents.__init__(self, name)
        self._paused = False
        self._watcher = TreeWatcher(self.source, step_ms=step_ms, debounce_ms=debounce_ms)
        self.tracker = LocalTracker(self.source, self.rules, self._watcher)
        self._following = False
        self._failure = ""  # the last batch's first failed operation, with how many more
        ViewKeeping.__init__(self)

    # -- public API ------------------------------------------------------------------------------
    async def full_sync(self, *, complete: bool = False) -> BatchApplied:
        """List both trees, send what differs, delete what sync put there and the tree lost.

        A no-op when the VM already holds the tree (no file data moves). Raises
        :class:`SyncError` on a refusal (missing or empty source, a forbidden dest) or when the VM
        cannot be reached; with ``complete`` (a barrier before a job) also when an operation
        failed, naming the first.
        """
        async with self._lock:
            try:
                event = await self._full_sync_locked()
                if complete:
                    self._require_complete(event)
                return event
            except AgentLost as err:
                self._drop_agent()
                self._set_state("error", reason=str(err))
                raise SyncLostError(f"sync to {self.name or self.dest} failed: {err}") from err

    async def barrier(self, timeout: float | None = None) -> None:
        """Return once the VM holds the current local tree (checked by a full diff).

        Waits through a dropped connection; ``timeout`` (seconds) bounds the wait.
        Raises :class:`SyncError` when sync stopped for a reason the user must fix.
        """

        async def attempt() -> None:
            retry = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
            while True:
                async with self._lock:
                    try:
                        self._require_complete(await self._full_sync_locked())
                        return
                    except AgentLost as err:
                        self._drop_agent()
                        self._set_state("reconnecting", reason=str(err))
                await asyncio.sleep(retry.pause())

        await within(timeout, attempt())

    def pause(self) -> None:
        """Stop sending watched changes; they queue until :meth:`resume` (the TUI's toggle key)."""
        self._paused = True
        self._set_state("paused")

    def resume(self) -> None:
        """Send what queued while paused and follow again."""
        self._paused = False
        self._watcher.inject([])

    @property
    def paused(self) -> bool:
        return self._paused

    async def follow(self) -> None:
        """Full sync, then send each batch of local changes until cancelled.

        Survives dropped connections (changes queue; a full diff runs on reconnect). Raises
        :class:`SyncError` when it has to stop: the source vanished or was emptied, or the VM
        refuses the destination.
        """
        self._following = True
        try:
            await self.tracker.start_watching()
            needs_full = True
            retry = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
            while True:
                try:
                    if needs_full:
                        # Connecting, the agent's start and the scan in one go: a new agent gets
                        # the scan request with its init (one round trip less than apart).
                        async with self._lock:
                            await self._full_sync_locked()
                        needs_full = False
                        retry.reset()
                    await self._follow_once()
                except AgentLost as err:
                    self._drop_agent()
                    self._set_state("reconnecting", reason=str(err))
                    if needs_full:  # the reconnect itself failed: back off before the next try
                        await asyncio.sleep(retry.pause())
                    needs_full = True
        except SyncError as err:
            self._set_state("error", reason=str(err))
            raise
        finally:
            self._following = False
            await self._watcher.close()
            self._drop_agent()
            self._save_view_soon()
            if self._state != "error":
                self._set_state("stopped")

    async def close(self) -> None:
        """End the agent on the VM (``follow`` does this itself when cancelled) and keep the
        session's view of the VM on local disk for the next session."""
        await self._watcher.close()
        self._drop_agent()
        self._forget_offer()
        self._save_view_soon()
        if self._saving is not None:
            await asyncio.shield(self._saving)

    # -- internals -------------------------------------------------------------------------------
    def _require_complete(self, event: BatchApplied) -> None:
        """Raise when ``event`` left the VM short of the tree: a job must not start on part of it."""
        why = incomplete(event, self._failure, self.tracker.unlisted)
        if why:
            raise SyncError(f"sync to {self.name or self.dest} is incomplete: {why}")

    def _drop_agent(self) -> None:
        if self._agent is not None:
            self._agent.close()
            self._agent = None

    async def _ensure_agent(self, *, scan: bool = False) -> RemoteAgent:
        """The running agent, started if needed; ``scan``: a new agent gets the scan request with
        its init (:meth:`RemoteAgent.start`), and the caller must call its ``scan()`` next."""
        if self._agent is not None and self._agent.broken:
            self._drop_agent()  # a transfer was cancelled mid-file: the agent is out of frame
        if self._agent is None:
            self._set_state("connecting", reason=self._reason if self._state == "reconnecting" else "")
            digest: asyncio.Task[str | None] | None = None
            try:
                self._view_key = await self._key_for(self.channel)
                if scan:  # worked out (a saved view read and checked) while the agent starts
                    digest = asyncio.create_task(self._offer_digest())
                self._agent = await RemoteAgent.start(
                    self.channel, self.dest, scan_digest=digest, stall_timeout=self.stall_seconds
                )
            except AgentRefused as err:
                raise SyncError(str(err)) from err
            except (HostKeyError, SshAuthError) as err:
                raise SyncError(str(err)) from err  # waiting cannot help: the user must act
            except AgentLost:
                raise
            except (GcptuiError, *TRANSPORT_ERRORS) as err:
                # Refused, reset, timed out, unreachable, the VM stopped: all may pass. Follow mode
                # and the barrier retry with backoff (state "reconnecting"); changes queue meanwhile.
                raise AgentLost(f"cannot reach the VM: {err}") from err
            finally:
                if digest is not None and not digest.done():
                    digest.cancel()
        return self._agent

    async def _full_sync_locked(self) -> BatchApplied:
        if not self.source.is_dir():
            raise SyncError(
                f"the local source {self.source} does not exist: sync stopped so the VM keeps its files"
            )
        self.rules.reload()
        self.tracker.clear_dirty()  # this diff covers everything changed so far
        # The local scan runs while the agent starts (a channel, an exec, a Python start-up: a
        # few hundred ms on first use) and lists the VM's tree: the three overlap.
        local_scan = asyncio.create_task(self._scan_counted())
        try:
            # A resync sends a digest of the view it holds (or, new, of the one an earlier session
            # saved); a VM that agrees sends no listing. A new agent gets the scan request with its
            # init, in one round trip.
            self._forget_offer()
            agent = await self._ensure_agent(scan=True)
            self._set_state("scanning")
            try:
                listing = await agent.scan(None if agent.scan_sent else self._memory_digest())
                fresh = listing is not None  # the VM's own listing: what to save next
                if listing is None and self._offered is not None:
                    # The VM holds exactly the view saved on disk, if that file holds it: a file
                    # that does not read back to the digest it claims costs a listing after all.
                    digest, reading = self._offered
                    saved = await reading
                    if saved is not None and saved.digest == digest:
                        listing = (saved.entries, saved.ledger)
                    else:
                        listing, fresh = await agent.scan(None), True
            except AgentRefused as err:
                raise SyncError(str(err)) from err
            finally:
                self._forget_offer()
        finally:
            scan = await local_scan
        if listing is not None:
            self.view.entries, self.view.ledger = listing
            self._view_dirty = self._view_dirty or fresh
        remote, ledger = self.view.entries, self.view.ledger
        self.tracker.reset(scan)
        self._report_links(scan)
        if self._following:
            self._report_links(await self.tracker.watch_new_dirs())
        plan = make_plan(
            self.tracker.entries,
            remote,
            ledger,
            rules=self.rules,
            protect=self.protect,
            keep=self.tracker.unlisted,
        )
        self._refuse_wipe(plan)
        event = await self._apply(plan, full=True)
        self._save_view_soon()
        return event

    async def _scan_counted(self) -> LocalScan:
        """The whole local tree, its count reported as it goes (ScanProgress) for a progress line."""
        loop = asyncio.get_running_loop()

        def counted(entries: int) -> None:  # in the scan's thread: the event goes out in the loop
            loop.call_soon_threadsafe(self._emit, ScanProgress(self.name, entries))

        scan = await asyncio.to_thread(scan_tree, self.source, self.rules, "", counted)
        self._emit(ScanProgress(self.name, len(scan.entries), done=True))
        return scan

    def _refuse_wipe(self, plan: Plan) -> None:
        if not self.tracker.entries and plan.removes:
            raise SyncError(
                f"the local source {self.source} is empty: sync stopped instead of deleting "
                f"{len(plan.removes)} paths on the VM; restore the tree, or delete them on the VM yourself"
            )

    async def _apply(self, plan: Plan, *, full: bool) -> BatchApplied:
        agent = await self._ensure_agent()
        total_files, total_bytes = len(plan.puts), plan.bytes
        if plan.changes:
            self._set_state("syncing", pending=plan.changes)

        def progress(done: int, sent: int) -> None:
            if full:
                self._emit(FullSyncProgress(self.name, done, total_files, sent, total_bytes))

        if plan.changes or plan.owns:
            self._view_dirty = True  # the results below change the view
        result = await apply_plan(
            agent, self.source, plan, self.view, progress if total_files else None, self.guard, self.relay
        )
        rounds = 0
        while result.resend and rounds < RESEND_ROUNDS:  # files that changed while read: send again
            rounds += 1
            retry = self._change_plan(self.tracker.restat(result.resend))
            extra = await apply_plan(agent, self.source, retry, self.view, guard=self.guard)
            result.written += extra.written
            result.deleted += extra.deleted
            result.bytes += extra.bytes
            result.resend = extra.resend
            result.errors += extra.errors
            result.refused += extra.refused
            result.relayed += extra.relayed
        for rel, reason in result.refused:  # held back on purpose: not a failure, said once
            self._warn(f"not synced: {rel} {reason}; {FIX}", rel, local=True)
        for rel in sorted(result.resend):  # still changing: the VM keeps its older copy for now
            result.errors.append(
                ("put", rel, f"it changed while being read, {RESEND_ROUNDS + 1} times in a row")
            )
        for op, path, message in result.errors:
            self._warn(failure_line(op, path, message), path)
        # What the VM keeps beyond the tree (a folder holding the job's outputs, another user's
        # folder mode) stays a warning: the VM still holds all of the tree.
        failures = [error for error in result.errors if not kept_on_vm(*error)]
        failed = len(failures)
        if failed:
            op, path, message = failures[0]
            more = f" (and {failed - 1} more)" if failed > 1 else ""
            self._failure = f"{op} {path}: {message}{more}"
        event = BatchApplied(
            self.name, result.written, result.deleted, result.bytes, result.ms, full, failed, result.relayed
        )
        if plan.changes or full:
            self._emit(event)
        if self._paused:
            self._set_state("paused")
        elif failed:
            # Never "in sync" after a failed operation: the state names what the VM lacks.
            self._set_state("incomplete", reason=self._failure)
        else:
            self._set_state("in_sync")
        return event

    async def _follow_once(self) -> None:
        paths = await self._watcher.next_batch(timeout=self.reconcile_seconds)
        if self._paused:
            self.tracker.mark_dirty_abs(paths)
            return
        async with self._lock:
            await self._ensure_agent()
            if not self.source.is_dir():
                raise SyncError(
                    f"the local source {self.source} vanished: sync stopped so the VM keeps its files"
                )
            if not paths and not self.tracker.has_dirty():
                # Periodic full diff: catches events the kernel dropped (its queue overflowed) and
                # anything that changed on the VM behind our back.
                await self._full_sync_locked()
                return
            else:
                self.tracker.mark_dirty_abs(paths)
                if self.tracker.needs_rescan():
                    plan = await self._reconcile_plan()
                else:
                    change = await self.tracker.apply_dirty()
                    self._report_links(change.scan)
                    await self._unforce_sent(change)
                    plan = self._change_plan(change)
            if not self.tracker.entries and plan.removes:
                # Renaming the only top-level directory passes through an empty tree for a moment:
                # look again before concluding that the source was emptied.
                await asyncio.sleep(EMPTY_SETTLE_SECONDS)
                plan = await self._reconcile_plan()
            self._refuse_wipe(plan)
            if plan or not paths:
                await self._apply(plan, full=False)
            for message in self._watcher.errors:
                self._warn(message)
