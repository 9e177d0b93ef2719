"""Messages that workers post to the app; widgets are only touched by their handlers."""

from __future__ import annotations

from textual.message import Message

from remote.fleet import FleetSnapshot


class FleetRefreshed(Message):
    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FleetRefreshFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error
