"""Keep-alive's record of what happened: events per VM folded into timelines, and the listeners
(the faces) told of each one; a listener's bug never stops a recovery."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from gcptui.remote.keepalive.events import EventKind, RecoveryEvent, Timeline, now

log = logging.getLogger(__name__)


class EventLog:
    """``timelines``: the latest per VM; ``history``: every one per VM, oldest first."""

    def __init__(self, on_event: Callable[[RecoveryEvent], None] | None = None) -> None:
        self.timelines: dict[str, Timeline] = {}
        self.history: dict[str, list[Timeline]] = {}
        self._listeners: list[Callable[[RecoveryEvent], None]] = [on_event] if on_event else []

    def subscribe(self, listener: Callable[[RecoveryEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every event; returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def note(self, name: str, kind: EventKind, detail: str = "") -> None:
        """Record an event of another watcher (auto-stop) in ``name``'s timeline and tell the listeners;
        it never changes a recovery's outcome (and starts no recovery timeline)."""
        event = RecoveryEvent(name, kind, now(), detail)
        timeline = self.timelines.get(name)
        if timeline is None:
            timeline = self.timelines[name] = Timeline(name, outcome="autostop")
            self.history.setdefault(name, []).append(timeline)
        timeline.events.append(event)
        self._emit(event)

    def mirror(self, event: RecoveryEvent) -> None:
        """Fold an event from beside this keep-alive (the keeper's, read from its status; the rows
        keep-alive's, for TPU nodes and GKE workloads) into ``event.name``'s timeline and tell the
        listeners, as if it were this one's."""
        timeline = self.timelines.get(event.name)
        if timeline is None or (event.kind in ("notice", "preempted") and timeline.outcome != "recovering"):
            timeline = self._new_timeline(event.name)
        timeline.add(event)
        self._emit(event)

    def _new_timeline(self, name: str) -> Timeline:
        timeline = Timeline(name)
        self.timelines[name] = timeline
        self.history.setdefault(name, []).append(timeline)
        return timeline

    def _event(self, name: str, kind: EventKind, detail: str = "", at: datetime | None = None) -> None:
        event = RecoveryEvent(name, kind, at or now(), detail)
        timeline = self.timelines.get(name) or self._new_timeline(name)
        timeline.add(event)
        self._emit(event)

    def _emit(self, event: RecoveryEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a face's bug must not stop recoveries
                log.exception("keep-alive listener failed")
