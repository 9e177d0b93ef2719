"""The emulator's records: instances and zone operations, as plain dataclasses.

Only the lifecycle in ``fleet.py`` changes them; ``resources.py`` renders them as GCE's JSON.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gcptui.remote.emulator.core.names import NAME_PATTERN, Accelerator, valid_name

__all__ = ["NAME_PATTERN", "Accelerator", "valid_name"]  # re-exported: the compute room's records

_ids = itertools.count(int(time.time() * 1000) % 10**12 * 1000 + 1)


def new_id() -> int:
    """A GCE-looking numeric id (uint64, unique in this process)."""
    return 4_000_000_000_000_000_000 + next(_ids)


def new_fingerprint() -> str:
    """A fingerprint as GCE hands them out: eight random bytes, base64."""
    return base64.b64encode(secrets.token_bytes(8)).decode()


def same_fingerprint(given: object, current: str) -> bool:
    """Fingerprints are bytes fields: clients may send them base64 or URL-safe base64 (gcloud does)."""
    if not isinstance(given, str):
        return False
    try:
        return base64.urlsafe_b64decode(given.replace("+", "-").replace("/", "_")) == base64.b64decode(
            current
        )
    except ValueError:
        return False


def timestamp(when: float | None = None) -> str:
    """GCE's timestamp format: RFC 3339 with milliseconds and the local offset."""
    moment = datetime.fromtimestamp(time.time() if when is None else when, tz=UTC).astimezone()
    return moment.isoformat(timespec="milliseconds")


@dataclass(eq=False)
class Disk:
    """One persistent disk (``disks.get``): what it was made from, its type and size."""

    name: str
    zone: str
    size_gb: int = 10
    type: str = "pd-balanced"  # the short disk-type name
    source_image: str | None = None  # a full image URL, as disks.get reports it
    source_snapshot: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    users: list[str] = field(default_factory=list)  # instance names it is attached to
    id: int = field(default_factory=new_id)
    created: str = field(default_factory=timestamp)


@dataclass(eq=False)
class AttachedDisk:
    """A disk as attached to an instance."""

    disk: str  # the Disk's name (same zone as the instance)
    device_name: str
    boot: bool = False
    auto_delete: bool = True
    mode: str = "READ_WRITE"


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
    automatic_restart: bool | None = None  # None: GCE's default (on, except for Spot VMs)
    on_host_maintenance: str | None = None  # MIGRATE or TERMINATE; None: GCE's default (see below)
    external_ip: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    status: str = "TERMINATED"
    id: int = field(default_factory=new_id)
    created: str = field(default_factory=timestamp)
    last_start: str | None = None
    last_stop: str | None = None
    network_ip: str = ""
    nat_ip: str | None = None  # set while running, when external_ip
    # Fields of an inserted body we do not model but echo back (serviceAccounts, tags, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    disks: list[AttachedDisk] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)  # instance metadata items
    fingerprint: str = field(default_factory=new_fingerprint)
    metadata_fingerprint: str = field(default_factory=new_fingerprint)
    label_fingerprint: str = field(default_factory=new_fingerprint)  # setLabels' optimistic lock
    disk: Path | None = None  # DIR/vms/NAME when SSH is enabled
    # The marker its processes carry (GCPTUI_EMULATED_VM): unique per emulator and VM.
    uid: str = field(default_factory=lambda: secrets.token_hex(6))
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def spot(self) -> bool:
        return self.provisioning_model == "SPOT" or self.preemptible

    @property
    def maintenance_policy(self) -> str:
        """What host maintenance does to it: GPU and Spot VMs cannot live-migrate (GCE's default and
        only choice for them); others migrate unless their insert asked for TERMINATE."""
        if self.gpus or self.spot:
            return "TERMINATE"
        return self.on_host_maintenance or "MIGRATE"

    @property
    def restarts_automatically(self) -> bool:
        return (not self.spot) if self.automatic_restart is None else self.automatic_restart

    @property
    def key(self) -> tuple[str, str]:
        return (self.zone, self.name)

    def host_alias(self, host_key: str) -> str:
        return f"compute.{self.id}"


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
    ended: float | None = None  # time.time() at DONE: completed operations expire (Fleet.operation_ttl)

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
        self.ended = time.time()
        self.status, self.progress, self.end_time = "DONE", 100, timestamp(self.ended)
        self.errors = list(errors or [])
        self.http_error = http_error
        self.done.set()
