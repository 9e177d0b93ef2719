"""Typed values that flow from the services in remote/ to the faces in tui/."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import asyncssh

# The kind of compute a fleet row comes from: the name its backend registers under
# (gcptui.remote.compute.registry). `ls --json` prints it as `source`.
Source = Literal["gce", "host", "tpu", "vertex", "gke"]
# What each kind is called in the detail pane and in one-line errors.
SOURCE_TITLES: dict[str, str] = {
    "gce": "GCE instance",
    "host": "static SSH host",
    "tpu": "Cloud TPU node",
    "vertex": "Vertex AI custom job",
    "gke": "GKE workload",
}


class State(StrEnum):
    """A fleet row's neutral state, the same words for every kind of compute.

    Each backend maps its own status word onto one of these (GCE's RUNNING and TPU's READY are both
    ``running``); workflows and faces decide on these, never on a backend's word, which is shown beside.
    """

    PROVISIONING = "provisioning"  # asked for, not yet up (GCE PROVISIONING/STAGING, a pending pod)
    RUNNING = "running"  # up: a process can run on it now
    STOPPING = "stopping"  # on its way down
    STOPPED = "stopped"  # down, can be started again; not by a preemption (or none is known)
    PREEMPTED = "preempted"  # down because the provider took it back (Spot, preemptible)
    SUCCEEDED = "succeeded"  # a workload that ran to its end (a Vertex AI job, a GKE Job)
    FAILED = "failed"  # a workload that ended in error, or a machine the provider could not run
    DELETING = "deleting"  # being deleted, or gone from the provider's listing
    UNKNOWN = "unknown"  # not known: a static host until SSH answers, a word the backend does not know

    @property
    def up(self) -> bool:
        """A process may run there now (SSH may reach it, a job may start)."""
        return self is State.RUNNING

    @property
    def reachable(self) -> bool:
        """Not known to be down or on its way: SSH may be tried (a running VM; a static host, whose
        state nobody knows until SSH answers)."""
        return self in (State.RUNNING, State.UNKNOWN)

    @property
    def down(self) -> bool:
        """Nothing runs there and nothing will until someone acts (start, recover, resubmit)."""
        return self in _DOWN


_DOWN = frozenset({State.STOPPED, State.PREEMPTED, State.SUCCEEDED, State.FAILED})


class StopCause(StrEnum):
    """Why a row stopped, as its backend found out (``Backend.why_stopped``)."""

    PREEMPTED = "preempted"  # the provider reclaimed a Spot/preemptible machine
    HOST_MAINTENANCE = "host-maintenance"  # the provider stopped or restarted it for its host
    USER = "user"  # someone stopped or deleted it (a person, a script, gcptui itself)
    UNKNOWN = "unknown"  # nothing says why (a provider's record of it may have expired)


@dataclass(frozen=True, slots=True)
class Worker:
    """One worker of a row: a TPU node's host, a Vertex AI job's task, a GKE workload's pod.

    A plain VM has none (the row is its own single machine). ``state`` is neutral.
    """

    name: str
    address: str | None = None
    state: State = State.UNKNOWN
    # Where the other workers reach it, and the known-hosts name its SSH host key is pinned under
    # (set by backends whose workers run sshd; not part of ``ls --json``).
    internal_ip: str | None = None
    host_key_alias: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "state": str(self.state)}


# An instance label naming the port its sshd listens on, when not [ssh] port (22 on GCE). The
# emulator sets it where all VMs share 127.0.0.1 (macOS); users may set it on their own VMs.
SSH_PORT_LABEL = "gcptui-ssh-port"
# An instance label a sweep's VMs carry (set by the API caller that makes them: ``sweep run``'s
# provisioning, or by hand): their own sweep keep-alive resumes their trials, so a keep-alive over
# "every Spot VM" (the TUI's, `gcptui keepalive`, the keeper) leaves them alone.
SWEEP_LABEL = "gcptui-sweep"
# The label GKE puts on each node's Compute Engine instance: a node belongs to its cluster (its
# workloads are the rows gcptui shows and recovers), so the fleet leaves such instances out unless
# asked (``gcptui ls --all``); `vm preempt` still reaches one (``simulateMaintenanceEvent``).
GKE_NODE_LABEL = "goog-gke-node"


def sweep_label_value(name: str) -> str:
    """A sweep's name as a GCE label value (lowercase letters, digits, ``-`` and ``_``; 63 at most)."""
    return re.sub(r"[^a-z0-9_-]", "-", name.lower())[:63]


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

    ``status`` is the backend's own word (GCE's RUNNING, TERMINATED, ...; UNKNOWN for static
    hosts); ``state`` is the neutral one every workflow and face decides on (set by the backend
    that made the row). ``preempted`` is True when the last stop of a TERMINATED VM was a preemption.
    ``workers`` are the row's workers (none for a VM or a host).
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
    state: State = State.UNKNOWN
    workers: tuple[Worker, ...] = ()
    # The name its SSH host key is filed under in known_hosts when the backend decides it (a TPU
    # worker: gcloud's ``tpu.<id>-<worker>-<key suffix>``); None: the SSH layer's rule.
    host_key_alias: str | None = None
    # Set on a worker's own row (``NODE/w1``, from ``Backend.worker_rows``): the row it belongs to.
    parent: str | None = None
    # The instance's own enable-oslogin metadata (None: not set, the project's decides).
    oslogin: bool | None = None
    # USD per hour while it runs (machine + GPUs; no disks), and where that price came from:
    # "catalog", "cache" (an earlier catalog read) or "fallback" (the bundled table), as of a date.
    usd_per_hour: float | None = None
    price_source: str | None = None
    price_as_of: str | None = None
    # What a person calls the row when it is not its name (a Vertex AI job's display name; its
    # 19-digit id stays the handle gcloud and ``ls --json`` give).
    title: str | None = None
    # False: the row is a job the provider runs on machines it does not show (a Vertex AI custom
    # job), so the faces count it apart from machines.
    machine: bool = True

    @property
    def key(self) -> str:
        """Stable identity in the fleet (names are unique per zone, hosts have no zone)."""
        return f"{self.source}:{self.zone}/{self.name}"

    @property
    def reachable(self) -> bool:
        """A shell can be tried: not known to be down, and an address (a static host's state is
        unknown until SSH answers). The one rule every face and workflow asks."""
        return self.state.reachable and bool(self.external_ip or self.internal_ip)

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
            "state": str(self.state),
            "workers": [w.to_json() for w in self.workers],
            "usd_per_hour": self.usd_per_hour,
            "price_source": self.price_source,
            "price_as_of": self.price_as_of,
        }


# How services (sync, logs, GPU, jobs) reach a host: await it for a live connection. The SSH pool
# hands these out; it reconnects with backoff, so after a ConnectionLost a service simply awaits again.
ConnectionGetter = Callable[[], Awaitable["asyncssh.SSHClientConnection"]]


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """One refresh of the fleet: every row of every configured kind of compute, when it was read and from where."""

    instances: tuple[Instance, ...]
    refreshed_at: datetime
    source: str
    errors: tuple[str, ...] = field(default=())

    def find(self, name: str) -> Instance | None:
        return next((i for i in self.instances if i.name == name), None)


def run_spend(
    usd_per_hour: float | None, started_at: str | None, ended_at: str | None, now: datetime
) -> float | None:
    """What a run has cost so far: the row's hourly price (``Instance.usd_per_hour``) times the time
    since the job started (until it ended). An upper bound when the machine was stopped meanwhile (a
    preemption): stopped time is not billed."""
    if usd_per_hour is None or not started_at:
        return None
    try:
        start = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
        end = datetime.fromisoformat(ended_at.replace("Z", "+00:00")) if ended_at else now
    except ValueError:
        return None
    if start.tzinfo is None or end.tzinfo is None:
        return None
    hours = max(0.0, (end - start).total_seconds() / 3600)
    return round(usd_per_hour * hours, 2)
