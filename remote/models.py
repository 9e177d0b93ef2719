"""Typed values that flow from the services in remote/ to the faces in tui/."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import asyncssh

Source = Literal["gce", "host"]

# An instance label naming the port its sshd listens on, when not [ssh] port (22 on GCE). The
# emulator sets it where all VMs share 127.0.0.1 (macOS); users may set it on their own VMs.
SSH_PORT_LABEL = "gcptui-ssh-port"


@dataclass(frozen=True, slots=True)
class Gpu:
    """An accelerator attached to an instance: GCE's short type name and how many."""

    type: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "count": self.count}


@dataclass(frozen=True, slots=True)
class Instance:
    """One machine of the fleet: a GCE instance or a static ``[[hosts]]`` entry.

    ``status`` is GCE's own word (RUNNING, TERMINATED, ...); static hosts read RUNNING.
    ``preempted`` is True when the last stop of a TERMINATED VM was a preemption.
    """

    name: str
    zone: str
    status: str
    machine_type: str = ""
    gpus: tuple[Gpu, ...] = ()
    spot: bool = False
    termination_action: str | None = None
    external_ip: str | None = None
    internal_ip: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    instance_id: str | None = None
    last_start: str | None = None
    last_stop: str | None = None
    preempted: bool = False
    source: Source = "gce"
    # The instance's own enable-oslogin metadata (None: not set, the project's decides).
    oslogin: bool | None = None
    # USD per hour while it runs (machine + GPUs; no disks), and where that price came from:
    # "catalog", "cache" (an earlier catalog read) or "fallback" (the bundled table), as of a date.
    usd_per_hour: float | None = None
    price_source: str | None = None
    price_as_of: str | None = None

    @property
    def key(self) -> str:
        """Stable identity in the fleet (names are unique per zone, hosts have no zone)."""
        return f"{self.source}:{self.zone}/{self.name}"

    @property
    def gpu_summary(self) -> str:
        return ", ".join(f"{g.count}x {g.type}" for g in self.gpus)

    def to_json(self) -> dict[str, Any]:
        """The ``ls --json`` object of docs/REFERENCE.md."""
        return {
            "name": self.name,
            "zone": self.zone or None,
            "status": self.status,
            "preempted": self.preempted,
            "machine_type": self.machine_type,
            "gpus": [g.to_json() for g in self.gpus],
            "spot": self.spot,
            "termination_action": self.termination_action,
            "external_ip": self.external_ip,
            "internal_ip": self.internal_ip,
            "labels": dict(self.labels),
            "instance_id": self.instance_id,
            "last_start": self.last_start,
            "last_stop": self.last_stop,
            "source": self.source,
            "usd_per_hour": self.usd_per_hour,
            "price_source": self.price_source,
            "price_as_of": self.price_as_of,
        }


# How services (sync, logs, GPU, jobs) reach a host: await it for a live connection. The SSH pool
# hands these out; it reconnects with backoff, so after a ConnectionLost a service simply awaits again.
ConnectionGetter = Callable[[], Awaitable["asyncssh.SSHClientConnection"]]
