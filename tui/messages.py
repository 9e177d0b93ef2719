"""Messages: workers post them to the app, the app to its screens; only handlers touch widgets."""

from __future__ import annotations

from textual.message import Message

from gcptui.remote.models import FleetSnapshot


class FleetRefreshed(Message, bubble=False):  # the app forwards it to the screen: no echo
    """A new list of the fleet (the worker to the app, the app to the fleet screen)."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FleetRefreshFailed(Message, bubble=False):
    """The fleet could not be listed; ``error`` is the one line to show, ``problems`` every setup
    problem found (the error, and a missing project behind a missing login) for the first-launch panel."""

    def __init__(self, error: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.error = error
        self.problems = problems or (error,)


class LiveChanged(Message, bubble=False):
    """The monitors learnt something about these machines (coalesced: one message per frame)."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__()
        self.names = names
