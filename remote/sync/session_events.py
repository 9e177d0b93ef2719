"""The event side of a sync session: its state, its subscribers, and each warning said once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from gcptui.remote.sync.events import SyncEvent, SyncStateChanged, SyncStateName, SyncWarning
from gcptui.remote.sync.local_tree import LocalScan


class SessionEvents:
    """State and events of one session (``SyncSession`` is one): the CLI and the TUI subscribe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._state: SyncStateName = "connecting"
        self._reason = ""
        self._subscribers: list[asyncio.Queue[SyncEvent]] = []
        self._callbacks: list[Callable[[SyncEvent], None]] = []
        self._warned: set[tuple[str, str]] = set()

    @property
    def state(self) -> SyncStateName:
        """The current state (the last :class:`SyncStateChanged` sent)."""
        return self._state

    def subscribe(self, callback: Callable[[SyncEvent], None]) -> None:
        """Call ``callback`` with every event, synchronously, in the session's event loop."""
        self._callbacks.append(callback)

    async def events(self) -> AsyncIterator[SyncEvent]:
        """Every event from now on, starting with the current state, until the consumer stops."""
        queue: asyncio.Queue[SyncEvent] = asyncio.Queue()
        self._subscribers.append(queue)
        try:
            yield SyncStateChanged(self.name, self._state, 0, self._reason)
            while True:
                yield await queue.get()
        finally:
            self._subscribers.remove(queue)

    def _emit(self, event: SyncEvent) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)
        for callback in self._callbacks:
            callback(event)

    def _set_state(self, state: SyncStateName, pending: int = 0, reason: str = "") -> None:
        if (state, reason) != (self._state, self._reason) or state == "syncing":
            self._state, self._reason = state, reason
            self._emit(SyncStateChanged(self.name, state, pending, reason))

    def _warn(self, message: str, path: str = "", *, local: bool = False) -> None:
        if (message, path) not in self._warned:  # each warning once per session
            self._warned.add((message, path))
            self._emit(SyncWarning(self.name, message, path, local))

    def _report_links(self, scan: LocalScan) -> None:
        for rel, target in scan.links_out.items():
            self._warn(f"not synced: the link {rel} -> {target} leads out of the tree", rel)
        for rel, reason in scan.unlisted.items():
            self._warn(
                f"cannot read {rel or 'the source'} ({reason}): not synced; the VM keeps its copy", rel
            )
