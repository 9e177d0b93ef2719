"""The saved-view side of a sync session: what it believes the VM holds, kept on local disk
between sessions (``saved_view``) and offered to a new agent as a digest, so a cold no-op resync
gets ``same`` instead of the VM's listing."""

from __future__ import annotations

import asyncio
import logging

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.sync import saved_view
from gcptui.remote.sync.agent_client import view_digest
from gcptui.remote.sync.applier import RemoteView

log = logging.getLogger("gcptui.remote.sync.session")


class ViewKeeping:
    """Keeps ``view`` (a session's picture of the VM) on local disk; ``SyncSession`` is one."""

    view: RemoteView
    dest: str

    def __init__(self) -> None:
        # The view kept on local disk between sessions (saved_view): its key (set once connected:
        # the VM's host key names it), the one offered to the VM with a new agent's scan, whether
        # this view changed since it was last saved, and the write under way.
        self._view_key = ""
        # The saved view offered with a new agent's first scan: its digest, and its reading.
        self._offered: tuple[str, asyncio.Task[saved_view.SavedView | None]] | None = None
        self._view_dirty = False
        self._saving: asyncio.Task[None] | None = None

    async def _key_for(self, channel: ExecChannel) -> str:
        """The saved view's key for the machine ``channel`` reaches and this dest ("" when it cannot
        be named). Over SSH the machine is its host key (a Spot VM's address changes on restart,
        its host key does not); another channel names it by ``where`` (a pod's namespace and name).
        A key that names the wrong machine costs one listing, never a wrong view: the VM answers
        ``same`` only to the digest of exactly what it holds."""
        if isinstance(channel, SshExecChannel):
            identity = await channel.identity()
            if identity is None:  # GSS key exchange: no host key to name the VM by
                return ""
            return saved_view.view_key(*identity, self.dest)
        return saved_view.view_key(f"where:{channel.where}", "", self.dest)

    def _memory_digest(self) -> str | None:
        """The digest of the view this session holds (None: it holds none yet)."""
        if not self.view.entries and not self.view.ledger:
            return None
        return view_digest(self.view.entries, self.view.ledger)

    async def _offer_digest(self) -> str | None:
        """The digest to send with a new agent's first scan: of the view in memory, else the one
        an earlier session saved on disk claims (``self._offered``: read and checked in the
        background, off the round trip's path), else none (the listing)."""
        self._forget_offer()
        digest = self._memory_digest()
        if digest is not None or not self._view_key:
            return digest
        digest = saved_view.peek(self._view_key)  # one small read
        if digest is not None:
            self._offered = (digest, asyncio.create_task(asyncio.to_thread(saved_view.load, self._view_key)))
        return digest

    def _forget_offer(self) -> None:
        if self._offered is not None:
            self._offered[1].cancel()  # the thread finishes on its own; its result is dropped
            self._offered = None

    def _save_view_soon(self) -> None:
        """Write the view to local disk in the background if it changed since last written."""
        if not self._view_dirty or not self._view_key:
            return
        self._view_dirty = False
        key, entries, ledger = self._view_key, dict(self.view.entries), dict(self.view.ledger)
        previous = self._saving

        async def write() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)  # in order, one at a time
            try:
                await asyncio.to_thread(saved_view.save, key, entries, ledger)
            except (OSError, ValueError) as err:  # a cache: without it the next session lists the VM once
                log.debug("could not save the sync view: %s", err)

        self._saving = asyncio.create_task(write())
