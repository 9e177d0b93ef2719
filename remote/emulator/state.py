"""The emulator's records: instances and zone operations, as plain dataclasses.

Only the lifecycle in ``fleet.py`` changes them; ``resources.py`` renders them as GCE's JSON.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_ids = itertools.count(int(time.time() * 1000) % 10**12 * 1000 + 1)


def new_id() -> int:
    """A GCE-looking numeric id (uint64, unique in this process)."""
    return 4_000_000_000_000_000_000 + next(_ids)


def timestamp(when: float | None = None) -> str:
    """GCE's timestamp format: RFC 3339 with milliseconds and the local offset."""
    moment = datetime.fromtimestamp(time.time() if when is None else when, tz=UTC).astimezone()
    return moment.isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class Accelerator:
    """GPUs attached to an emulated VM: GCE's short accelerator type and count."""

    type: str
    count: int


@dataclass(eq=False)
class Vm:
    """One emulated instance."""

    name: str
    zone: str
    machine_type: str
    gpus: tuple[Accelerator, ...] = ()
    provisioning_model: str = "STANDARD"  # STANDARD or SPOT
    preemptible: bool = False  # legacy preemptible VMs
    termination_action: str | None = None  # STOP or DELETE for Spot VMs
    external_ip: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    status: str = "TERMINATED"
    id: int = field(default_factory=new_id)
    created: str = field(default_factory=timestamp)
    last_start: str | None = None
    last_stop: str | None = None
    network_ip: str = ""
    nat_ip: str | None = None  # set while running, when external_ip
    # Fields of an inserted body we do not model but echo back (disks, metadata, serviceAccounts, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    disk: Path | None = None  # DIR/vms/NAME when SSH is enabled
    # The marker its processes carry (GCPTUI_EMULATED_VM): unique per emulator and VM.
    uid: str = field(default_factory=lambda: secrets.token_hex(6))
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def spot(self) -> bool:
        return self.provisioning_model == "SPOT" or self.preemptible

    @property
    def key(self) -> tuple[str, str]:
        return (self.zone, self.name)


@dataclass(eq=False)
class Operation:
    """A zone operation (a user's call, or a system event such as a preemption)."""

    zone: str
    operation_type: (
        str  # start, stop, delete, insert, reset, simulateMaintenanceEvent, compute.instances.preempted
    )
    target: str  # instance name
    target_id: int
    user: str = "user@emulator.local"
    name: str = ""
    id: int = field(default_factory=new_id)
    status: str = "PENDING"
    progress: int = 0
    insert_time: str = field(default_factory=timestamp)
    start_time: str | None = None
    end_time: str | None = None
    errors: list[dict[str, str]] = field(default_factory=list)
    http_error: tuple[int, str] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def __post_init__(self) -> None:
        if not self.name:
            prefix = "systemevent" if self.user == "system" else "operation"
            self.name = f"{prefix}-{int(time.time() * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}"

    def running(self) -> None:
        self.status, self.progress, self.start_time = "RUNNING", 0, self.start_time or timestamp()

    def finish(
        self, errors: list[dict[str, str]] | None = None, http_error: tuple[int, str] | None = None
    ) -> None:
        """DONE, with GCE's ``error.errors`` entries when it failed."""
        self.start_time = self.start_time or timestamp()
        self.status, self.progress, self.end_time = "DONE", 100, timestamp()
        self.errors = list(errors or [])
        self.http_error = http_error
        self.done.set()
