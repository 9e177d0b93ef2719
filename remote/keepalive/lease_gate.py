"""The lease as keep-alive consults it: once per poll, before any recovery is decided.

Two roles share one lease (``lease.py``), and only its holder recovers anything:

- the **keeper** (``gcptui keeper run`` on a small VM) takes the lease when it is free or lapsed and
  renews it on every poll; it also writes its status (``.gcptui-keeper/status``: last poll, machines
  watched, lease holder, its recent events), signed with the same key;
- the **laptop** (the TUI, ``gcptui keepalive``, sweeps) defers to a live keeper: while the keeper's
  status keeps changing (its own clock), it does not take the lease, and gives back one it holds as
  soon as no recovery of its own is in flight. When the keeper's status stops changing for ``ttl``
  seconds, the laptop takes the lease like any other lapsed one.

Each side decides a keeper's liveness and a lease's lapse by its own monotonic clock (no wall clocks
compared). A recovery checks the lease again right before its job is relaunched (``fence``): a
holder that lost the lease meanwhile (a laptop that slept past the ttl) stops there with
``LeaseLost``, so the job starts once; the lease names the recoveries in flight (written before a
recovery starts any VM), and whoever takes it over finishes them (``taken_over``). The keeper's
events are mirrored into the laptop's timelines ("keeper: ..."), which is how the TUI's keep-alive
column and timeline show the keeper's actions.

When the lease cannot be reached at all (``LeaseUnreachable``: credentials, network, a wrong bucket), a
laptop falls back on what it knows of the bucket (``known_keepers.py``): with no keeper ever seen or
deployed there, it recovers without the lease (``unleased``; nobody else recovers these machines);
with one, it keeps deferring to it, and its standing says "recovery paused" with the reason and the
fix, so that the faces show it within the poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast, get_args

from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind, RecoveryEvent, Relaunch, ResumePoint, StepReporter
from gcptui.remote.keepalive.known_keepers import KnownKeepers
from gcptui.remote.keepalive.lease import (
    DEFAULT_TTL,
    Lease,
    LeaseLost,
    LeaseUnreachable,
    LeaseView,
    SignedObject,
)
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import vm_field

log = logging.getLogger(__name__)

Role = Literal["laptop", "keeper"]
STATUS_OBJECT = ".gcptui-keeper/status"
MAX_STATUS_BYTES = 256 * 1024
STATUS_EVENTS = 50  # the keeper's recent events its status carries
KEEPER_PREFIX = "keeper: "
_KINDS = frozenset(get_args(EventKind))


class KeeperStatus(SignedObject):
    """The keeper's status object: written each poll by the keeper, read by laptops and `keeper status`."""

    max_bytes = MAX_STATUS_BYTES

    def __init__(self, bucket_url: str, key: bytes, **options: Any) -> None:
        super().__init__(bucket_url, STATUS_OBJECT, key, **options)


def status_events(body: dict[str, Any] | None) -> list[tuple[int, RecoveryEvent]]:
    """The (sequence, event) pairs a status names, bounded and sanitized: a bucket is a VM's to write,
    and even a signed status names machines and text that end up on the laptop's screen."""
    found: list[tuple[int, RecoveryEvent]] = []
    raw = body.get("events") if body is not None else None
    for item in raw[-STATUS_EVENTS:] if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        seq, name, kind, at = item.get("seq"), item.get("machine"), item.get("kind"), item.get("at")
        if not (isinstance(seq, int) and isinstance(name, str) and kind in _KINDS and isinstance(at, str)):
            continue
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            continue
        detail = item.get("detail")
        event = RecoveryEvent(vm_field(name), cast(EventKind, kind), when, vm_field(str(detail or "")))
        found.append((seq, event))
    return found


@dataclass
class LeaseGate:
    """One keep-alive's side of the lease; ``check()`` once per poll (blocking: run in a thread)."""

    lease: Lease
    status: KeeperStatus
    role: Role
    in_flight: Callable[[], Iterable[str]] = tuple  # the machines whose recovery is in flight
    watched: Callable[[], Iterable[str]] = list  # what the keeper's status lists as watched
    clock: Callable[[], float] = time.monotonic
    holding: bool = False
    holder: str | None = None  # who holds the lease, as last seen (None: nobody)
    keeper_live: bool = False  # (laptop) a keeper's status changed within the ttl
    keeper: dict[str, Any] | None = None  # the keeper's status, as last read
    known: KnownKeepers | None = (
        None  # (laptop) the buckets known to have a keeper, for when this is out of reach
    )
    unreachable: LeaseUnreachable | None = (
        None  # why the last check could not reach the lease (None: it could)
    )
    unleased: bool = False  # (laptop) recovering without the lease: out of reach, and no keeper known
    polls: int = 0
    started: float = field(default_factory=time.time)
    _events: deque[tuple[int, RecoveryEvent]] = field(default_factory=lambda: deque(maxlen=STATUS_EVENTS))
    _seq: int = 0
    _mirrored: tuple[str, int] = ("", 0)  # (keeper boot, last sequence) mirrored into our timelines
    _boot: str = field(default_factory=lambda: secrets.token_hex(4))
    _taken: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # see taken_over
    _keeper_seen: bool | None = (
        None  # (laptop) this process read a keeper status in the bucket (None: never read)
    )

    # -- each poll -------------------------------------------------------------------------------------

    def check(self) -> bool:
        """Look at the lease and take, renew or give it back; True when this keep-alive may recover.

        A bucket that cannot be read keeps a holder acting for half a ttl past its last renewal (no
        other actor can take over before a whole ttl); then a laptop that knows no keeper for the
        bucket recovers without the lease, and one that knows a keeper (and the keeper itself) stops
        until the bucket answers."""
        self.polls += 1
        try:
            holding = self._decide()
            self.unreachable, self.unleased = None, False
        except GcptuiError as err:
            # Named after the lease whichever object failed (the status is read first): one bucket.
            why, fix = (err.why, err.fix) if isinstance(err, LeaseUnreachable) else (str(err), "see the log")
            out = LeaseUnreachable(self.lease.url, why, fix)
            if self.unreachable is None or str(out) != str(self.unreachable):
                log.warning("keep-alive lease: %s", out)  # once per reason, not once per poll
            self.unreachable = out
            renewed = self.lease.renewed_at
            holding = (
                bool(self.lease.generation)
                and renewed is not None
                and (self.clock() - renewed < self.lease.ttl / 2)
            )
            self.unleased = not holding and self.role == "laptop" and not self.keeper_known()
            holding = holding or self.unleased
        if holding != self.holding:
            log.info(
                "keep-alive lease: %s", "held by this keep-alive" if holding else f"held by {self.holder}"
            )
        self.holding = holding
        if self.role == "keeper":
            try:
                self._write_status()
            except GcptuiError as err:
                log.warning("keeper status: %s", err)
        return holding

    def _claim(self, view: LeaseView) -> bool:
        """Take or renew the lease, naming the recoveries in flight; a lapsed lease taken from another
        holder leaves its unfinished recoveries for ``taken_over``."""
        holding = self.lease.claim(view, self.in_flight())
        previous = view.holder
        if holding and previous is not None and previous != self.lease.holder and view.recovering:
            self._taken.append((previous, view.recovering))
        return holding

    def taken_over(self) -> list[tuple[str, tuple[str, ...]]]:
        """(previous holder, the machines it was recovering) for each lease this keep-alive took from a
        holder that stopped renewing mid-recovery, since the last call. That holder's fence stops its
        relaunch (``LeaseLost``), so these recoveries are this keep-alive's to finish."""
        taken, self._taken = self._taken, []
        return taken

    def _decide(self) -> bool:
        if self.role == "keeper":
            holding = self._claim(self.lease.look())
            self.holder = self.lease.holder if holding else self.lease.look().holder
            return holding
        refused = self.status.refused
        body, generation, fresh = self.status.read()
        self.keeper = body
        self.keeper_live = body is not None and fresh
        # A keeper status there, even a stale one refused as a replay: a keeper was deployed here.
        self._note_keeper(body is not None or (generation != 0 and self.status.refused > refused))
        view = self.lease.look()
        self.holder = view.holder
        if not self.keeper_live:
            holding = self._claim(view)
            self.holder = self.lease.holder if holding else view.holder
            return holding
        if view.holder == self.lease.holder and view.generation == self.lease.generation:
            if list(self.in_flight()):
                return self._claim(view)  # finish the recovery in flight, then give it back
            self.lease.release()
            self.holder = None
        return False

    def _note_keeper(self, present: bool) -> None:
        if present != self._keeper_seen:
            self._keeper_seen = present
            if self.known is not None:
                try:
                    self.known.note(self.status.bucket_url, present)
                except OSError as err:  # the state dir: keep-alive goes on; only the fallback knows less
                    log.warning("keep-alive: cannot note the bucket's keeper: %s", err)

    def keeper_known(self) -> bool:
        """(laptop) Whether a keeper may be recovering this bucket's machines: its status was read in
        the bucket by this process, or (never read) this laptop saw or deployed one before."""
        if self._keeper_seen is not None:
            return self._keeper_seen
        return self.known is not None and self.known.known(self.status.bucket_url)

    def record_intent(self) -> None:
        """Before a recovery acts (starts or recreates a VM): renew the lease naming it in flight, so
        that a successor taking the lease over while this process stalls finishes it; ``LeaseLost``
        when the lease is another's. Blocking.

        A conditional write can lose to this process's own renewal in another thread; a few tries
        settle it, and the lease names this holder either way. Without the lease (``unleased``) there
        is nobody to tell."""
        if self.unleased:
            return
        for _ in range(3):
            view = self.lease.look()
            if view.holder != self.lease.holder:
                self.holding = False
                raise LeaseLost(
                    f"the keep-alive lease passed to {view.holder or 'nobody'}: not recovered here"
                )
            if self._claim(view):
                return

    def fence(self) -> None:
        """Right before a job is relaunched: ``LeaseLost`` unless this keep-alive still holds the lease
        (the latest write names it). Blocking.

        The holder decides, not the generation: this process renews in another thread each poll, so a
        newer generation under its own name is its own renewal whose reply has not come back yet (at a
        load of 8 that window ended a keeper's recovery, and nobody else relaunched the job). Only a
        write of another holder, made after a conditional read, passes the lease on. Recovering
        without the lease (``unleased``, as of the last check), there is no other actor to fence off."""
        if self.unleased:
            return
        view = self.lease.look()
        if view.holder != self.lease.holder:
            self.holding = False
            raise LeaseLost(
                f"the keep-alive lease passed to {view.holder or 'nobody'}: not relaunched here (it recovers this VM)"
            )

    def close(self) -> None:
        """A clean exit gives the lease back at once, so another actor need not wait a ttl."""
        try:
            self.lease.release()
        except Exception as err:  # noqa: BLE001 - the exit goes on; the lease lapses by itself
            log.warning("keep-alive lease not released: %s", err)

    # -- the keeper's events and status ------------------------------------------------------------------

    def record(self, event: RecoveryEvent) -> None:
        """(keeper) Keep ``event`` for the status the next poll writes."""
        self._seq += 1
        self._events.append((self._seq, event))

    def _write_status(self) -> None:
        body = {
            "holder": self.lease.holder, "boot": self._boot, "version": _version(),
            "host": socket.gethostname(), "pid": os.getpid(),
            "started": self.started, "at": time.time(), "polls": self.polls,
            "holding": self.holding, "lease_holder": self.holder, "ttl": self.lease.ttl,
            "watched": sorted(self.watched())[:500],
            "events": [
                {"seq": seq, "machine": e.name, "kind": e.kind, "at": e.at.isoformat(), "detail": e.detail[:500]}
                for seq, e in self._events
            ],
        }  # fmt: skip
        self.status.write(body)

    def new_keeper_events(self) -> list[RecoveryEvent]:
        """(laptop) The keeper's events not yet mirrored, each detail prefixed ``keeper: ``."""
        body = self.keeper
        if body is None or self.role != "laptop":
            return []
        boot = str(body.get("boot", ""))
        last = self._mirrored[1] if self._mirrored[0] == boot else 0
        fresh = [(seq, e) for seq, e in status_events(body) if seq > last]
        if not fresh:
            return []
        self._mirrored = (boot, max(seq for seq, _ in fresh))
        return [
            RecoveryEvent(
                e.name, e.kind, e.at, KEEPER_PREFIX + e.detail if e.detail else KEEPER_PREFIX.strip()
            )
            for _, e in fresh
        ]

    def standing(self) -> Standing:
        """Who recovers, as this keep-alive sees it after its last ``check()``: for a status line."""
        me = "this keeper" if self.role == "keeper" else "this laptop"
        if self.unreachable is not None and self.unleased:
            return Standing(
                "unleased",
                f"recovering without the lease (no keeper known for this bucket): cannot reach "
                f"{self.unreachable.url}: {self.unreachable.why}, fix: {self.unreachable.fix}",
            )
        if self.unreachable is not None and not self.holding:
            return Standing("paused", f"recovery paused: {self.unreachable}")
        silent = self._keeper_silence()
        if self.holding:
            text = f"{me} holds the lease"
            return Standing(
                "mine", f"keeper silent for {_span(silent)}: {text}" if silent is not None else text
            )
        keeper_holds = self.holder is not None and self.holder.startswith("keeper:")
        if silent is not None and (self.holder is None or keeper_holds):
            return Standing("taking_over", f"keeper silent for {_span(silent)}: taking over")
        if self.keeper_live or keeper_holds:
            return Standing("keeper", "keeper holds the lease")
        if self.holder:
            return Standing("other", f"{vm_field(self.holder, 80)} holds the lease")
        return Standing("nobody", "nobody holds the lease")

    def describe(self) -> str:
        """The lease in words, for a status line: who recovers."""
        return self.standing().text

    def _keeper_silence(self) -> float | None:
        """(laptop) Seconds the keeper's status has not changed, once that is past the ttl; else None."""
        if self.role != "laptop" or self.keeper is None or self.keeper_live:
            return None
        return self.status.unchanged_for()


@dataclass(frozen=True, slots=True)
class Standing:
    """The lease's standing: ``kind`` changes only when who recovers changes (a face says it then),
    ``text`` may change each poll (the keeper's silence counts up)."""

    kind: Literal["mine", "keeper", "taking_over", "other", "nobody", "paused", "unleased"]
    text: str


def _span(seconds: float | None) -> str:
    value = int(seconds or 0)
    if value < 120:
        return f"{value}s"
    return f"{value // 60}m" if value < 7200 else f"{value // 3600}h"


def standing_listener(gate: LeaseGate, tell: Callable[[Standing], None]) -> Callable[[list[Instance]], None]:
    """A ``KeepAlive.on_poll`` listener: ``tell(standing)`` after each poll whose standing's words
    changed (a face shows the text; it says it aloud only when ``kind`` changed)."""
    last: list[Standing] = []

    def listener(_rows: list[Instance]) -> None:
        now = gate.standing()
        if not last or now != last[0]:
            last[:] = [now]
            tell(now)

    return listener


def holder_name(role: Role, name: str | None = None) -> str:
    """A name unique to this process: two keep-alives of one laptop (the TUI and `gcptui keepalive`)
    are two actors, and a restarted keeper is a new one that waits for its old lease to lapse."""
    tag = secrets.token_hex(3)
    if role == "keeper":
        return f"keeper:{name or socket.gethostname()}:{tag}"
    return f"laptop:{socket.gethostname()}:{os.getpid()}:{tag}"


def fenced(relaunch: Relaunch, gate: LeaseGate) -> Relaunch:
    """``relaunch`` that first checks the lease is still ours (``LeaseGate.fence``)."""

    async def run(instance: Instance, report: StepReporter, /) -> int | ResumePoint | None:
        await asyncio.to_thread(gate.fence)
        return await relaunch(instance, report)

    return run


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gcptui")
    except PackageNotFoundError:
        return "unknown"


__all__ = [
    "DEFAULT_TTL", "KeeperStatus", "LeaseGate", "Role", "Standing", "fenced", "holder_name", "standing_listener",
    "status_events",
]  # fmt: skip
