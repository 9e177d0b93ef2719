"""The protocol every kind of compute implements: ``Backend``.

How to write one (a TPU backend, say), in ``remote/compute/tpu/``:

1. ``backend.py``: ``class TpuBackend(Backend)`` with ``kind = "tpu"`` (add the name to
   ``gcptui.remote.models.Source``). Its constructor takes the ``BackendContext`` and builds nothing
   expensive: clients are made on first use (the TUI starts before any Google library is imported).
2. Map the provider's status words to ``State`` in one module of the folder (``states.py``); set
   ``Instance.state`` on every row ``list_rows`` returns, keep the provider's word in ``status``.
3. Say per row what it can do (``capabilities``); leave out what the kind cannot do, and the faces
   hide or refuse it in one line. Methods for a capability a row lacks raise ``Unsupported``.
4. Register it in ``registry.py`` (``BACKENDS``: kind -> "module:Class", imported only when needed)
   and return ``None`` from ``configured`` when the config does not ask for it.
5. Pass ``tests/compute/test_conformance.py`` by adding a fixture that brings up its emulated form.

All methods except the exec channel's are blocking (plain HTTP calls, or waits on a provider's
operation): callers run them in a worker thread (``asyncio.to_thread``). Errors are
``gcptui.remote.errors.GcptuiError`` subclasses with one line that says what to do
(``NotFoundError`` for a row that is gone, ``CloudError`` for a provider's refusal).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from gcptui.remote.errors import CloudError, GcptuiError
from gcptui.remote.models import Instance, Source, State, StopCause, Worker

if TYPE_CHECKING:
    from gcptui.remote.cloud.create import CreateOptions
    from gcptui.remote.cloud.oslogin import OsLogin
    from gcptui.remote.compute.copies import Copier, CopyPlan, Report
    from gcptui.remote.compute.exec_channel import ExecChannel
    from gcptui.remote.config import Config
    from gcptui.remote.ssh.target import SshTarget


class Capability(StrEnum):
    """What a face or a workflow may ask of a row (``Backend.capabilities``)."""

    SHELL = "shell"  # it runs processes gcptui starts: exec channel, jobs, sync, logs, GPU telemetry
    START = "start"  # a stopped row can be started again
    STOP = "stop"  # a running row can be stopped (and keeps its disk)
    DELETE = "delete"  # it can be deleted
    RECOVER = "recover"  # a preempted row can be brought back (restarted or recreated)
    CREATE_LIKE = "create-like"  # new rows can be made like this one
    PRICE = "price"  # it has an hourly price (``price``)
    PREEMPTIBLE = "preemptible"  # the provider may take it back (Spot): keep-alive watches it
    DISK_OUTLIVES = "disk-outlives"  # its files survive a stop (a VM's disk; not a pod's)
    CLOUD_LOGS = "cloud-logs"  # its lines come from Cloud Logging, not from a file on a machine
    # its containers' own stdout/stderr are in the provider's log API (a pod's); read there when the
    # containers' command is the training (no ``[job].command``), as no job log exists on the machine
    CONTAINER_LOGS = "container-logs"
    CANCEL = "cancel"  # killing its job is an asynchronous cancel (``cancel``), not a signal sent
    # the provider can be asked to act out a maintenance event on it (``simulate_maintenance``): a
    # Spot VM is preempted, as GCE documents for testing preemption (``gcptui vm preempt``)
    SIMULATE_MAINTENANCE = "simulate-maintenance"
    # SSH keys of its own in the provider's metadata, beside the project's (``edit_ssh_keys``): the
    # keeper authorizes itself on the machines it watches alone
    INSTANCE_KEYS = "instance-keys"
    # the provider records who stopped it and when (GCE's operations): a user's stop is told from a
    # preemption, so a stop nothing explains counts as a preemption whose record expired, and a
    # provider's own restart after maintenance is found. Without it only a ``preempted`` state counts.
    STOPS_RECORDED = "stops-recorded"


class Recovery(StrEnum):
    """How ``Backend.recover`` brought a row back."""

    RESTARTED = "restarted"  # the same machine started again, its disk as it was
    RECREATED = "recreated"  # a new machine made like the old one (its files from the disk's origin)


# BackendContext.shared key: the process's ``FleetSource`` (the Google project, credentials, prices),
# shared by the backends of Google's APIs so each process authenticates and prices once.
SHARED_FLEET = "fleet"


class Unsupported(GcptuiError):
    """A row was asked for something its kind of compute cannot do."""

    def __init__(self, row: Instance, what: str) -> None:
        super().__init__(f"{row.name} is a {row.source} row: it cannot {what}")


class NotOffered(GcptuiError):
    """A backend was asked for something of its provider's project that it does not keep."""

    def __init__(self, kind: str, what: str) -> None:
        super().__init__(f"the {kind} backend {what}")


# ``edit_ssh_keys``' edit: the authorized key lines -> the new lines, or None to change nothing.
KeyEdit = Callable[[list[str]], "list[str] | None"]


class ContainerLine(Protocol):
    """One line of a container's own output (``container_logs``)."""

    @property
    def pod(self) -> str: ...  # the worker that wrote it (a pod's name)
    @property
    def time(self) -> str: ...  # RFC 3339, as the provider stamped it
    @property
    def text(self) -> str: ...  # sanitized, one line


class CloudLine(Protocol):
    """One line of a row's output in the provider's log API (``cloud_logs``)."""

    @property
    def task(self) -> str: ...  # the worker that wrote it (a Vertex AI task: workerpool0-0)
    @property
    def text(self) -> str: ...  # as written (untrusted: sanitize before showing), cut at a cap


class CloudLog(Protocol):
    """A row's lines in the provider's log API (``CLOUD_LOGS``), oldest first, each once. Blocking."""

    def history(self, count: int) -> Sequence[CloudLine]:
        """The last ``count`` lines so far; ``poll`` continues after them."""
        ...

    def poll(self, *, final: bool = False) -> Sequence[CloudLine]:
        """The lines written since the last read (``final``: every one, the row having ended)."""
        ...

    def ended(self) -> str | None:
        """The provider's word for how the row's work ended (read now); None while it runs."""
        ...


class BillingNode(Protocol):
    """A machine that keeps billing after a row is deleted (``billing_nodes``)."""

    @property
    def name(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def machine_type(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def spot(self) -> bool: ...
    @property
    def accelerator(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def usd_per_hour(self) -> float | None: ...


class Stockout(CloudError):
    """The provider has no capacity for the row right now (``begin_recovery``, ``recover``): trying
    again later, or in another zone, may succeed. The message is the provider's one line."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a row stopped (``why_stopped_many``) and when the provider says it happened (None: the
    record has no time)."""

    cause: StopCause
    at: datetime | None = None


# Every cause a provider can record (``why_stopped_many`` looks for all of them unless told fewer).
RECORDED_CAUSES = frozenset({StopCause.PREEMPTED, StopCause.HOST_MAINTENANCE, StopCause.USER})


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What a backend is built with: the loaded config and the process's shared services.

    ``connect`` hands out an exec channel over SSH for a row whose machine runs sshd (the shared
    pool: one connection per host, host keys verified); a backend without sshd ignores it.
    ``shared`` holds objects several backends of one provider share (Google credentials, the
    project, the price book), keyed by a name the backends agree on.
    """

    config: Config
    connect: Callable[[Instance], ExecChannel] | None = None
    shared: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rows:
    """One listing of a backend: its rows, and one line per part it could not read (never dropped
    silently: "zone us-east1-b unreachable ...")."""

    rows: tuple[Instance, ...]
    errors: tuple[str, ...] = ()


class Backend(ABC):
    """One kind of compute. Every row it lists carries ``source == kind``.

    The registry builds one instance per process (``registry.Compute``); it may keep caches and
    clients between calls and must be safe to call from two worker threads at once.
    """

    kind: ClassVar[Source]
    # True where ``FleetSource.snapshot`` reads this kind's rows itself (GCE instances, priced, and
    # static hosts); every other kind reaches the fleet table through ``Compute.rows_beyond_fleet``.
    listed_by_fleet: ClassVar[bool] = False
    # True where some of its rows can be brought back (``RECOVER``): keep-alive polls this kind.
    recovers_rows: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def configured(cls, context: BackendContext) -> Backend | None:
        """This backend built for ``context``; None when the config does not ask for this kind
        (no ``[gcp]``, no ``[[hosts]]``). Cheap: no client is built, no library imported."""

    @abstractmethod
    def list_rows(self) -> Rows:
        """Every row of this kind the config names (machines or workloads), each with its neutral
        ``state``, its own ``status`` word, ``workers`` and (where ``PRICE``) ``usd_per_hour``."""

    @abstractmethod
    def capabilities(self, row: Instance) -> frozenset[Capability]:
        """What ``row`` can do. May depend on the row (a Spot VM is ``PREEMPTIBLE``, an on-demand
        one is not) but not on its current state: a stopped VM still has ``SHELL``."""

    def can(self, row: Instance, capability: Capability) -> bool:
        return capability in self.capabilities(row)

    def get(self, row: Instance) -> Instance | None:
        """``row`` as the provider reports it now (None when it is gone). Default: one listing."""
        return next((r for r in self.list_rows().rows if r.name == row.name and r.zone == row.zone), None)

    # Lifecycle: each returns once the provider accepted and finished the change.
    def start(self, row: Instance) -> None:
        """Start a stopped row (``START``)."""
        raise Unsupported(row, "be started")

    def stop(self, row: Instance) -> None:
        """Stop a running row, keeping its disk (``STOP``)."""
        raise Unsupported(row, "be stopped")

    def delete(self, row: Instance) -> None:
        """Delete the row (``DELETE``)."""
        raise Unsupported(row, "be deleted")

    def cancel(self, row: Instance) -> None:
        """Ask the provider to stop the row's job (``CANCEL``); returns once asked, not once ended."""
        raise Unsupported(row, "be cancelled")

    def simulate_maintenance(self, row: Instance) -> None:
        """Have the provider act out a maintenance event on the row (``SIMULATE_MAINTENANCE``); returns
        once it accepted the event."""
        raise Unsupported(row, "be sent a simulated maintenance event (`vm preempt`)")

    def why_stopped(self, row: Instance) -> StopCause:
        """Why a row in a down state (``State.down``) stopped, from what the provider still records.
        ``UNKNOWN`` when nothing says (records expire: GCE keeps operations about an hour)."""
        if row.state is State.PREEMPTED:
            return StopCause.PREEMPTED
        return StopCause.UNKNOWN

    def why_stopped_many(
        self, rows: Sequence[Instance], *, causes: Collection[StopCause] = RECORDED_CAUSES
    ) -> dict[str, Stop]:
        """Why each of ``rows`` stopped since its ``last_start``, by row name, looking only for
        ``causes``; a row nothing recorded (among those causes) is left out. For a watch that asks
        every few seconds: one read of the provider's records per cause for all the rows, not one per
        row (GCE: one zone-operations listing). Asking with an older ``last_start`` finds a stop the
        provider recovered from by itself (GCE's restart after host maintenance). Default: ``why_stopped``
        per row."""
        found: dict[str, Stop] = {}
        for row in rows:
            cause = self.why_stopped(row)
            if cause in causes:
                found[row.name] = Stop(cause)
        return found

    def watch_rows(self) -> Rows:
        """The rows for a watch that polls every few seconds (keep-alive): as cheaply as the provider
        lists them, no prices, and a stopped row's state from the provider's word alone (a preempted one
        may read ``stopped``: ``why_stopped_many`` says why). Default: ``list_rows``."""
        return self.list_rows()

    def remember(self, row: Instance) -> bool:
        """While ``row`` runs, record what recreating it needs once the provider has forgotten it (a
        row without ``DISK_OUTLIVES`` is deleted when it stops: its settings and what its disks were
        made from go with it). True when it can be recreated from what is recorded. Cheap when called
        again for the same run. Default: False (nothing this kind needs to record)."""
        return False

    def prepare_to_act(self) -> None:  # noqa: B027 - an optional hook: most kinds need nothing
        """Build, ahead of need, what changing rows takes (a client library whose import costs a
        second): a watch calls it when a row turns suspect, so a recovery need not wait. Default: nothing."""

    def begin_recovery(self, row: Instance, *, zone: str | None = None) -> Recovery:
        """``recover`` without the wait: returns once the provider accepted the start or the creation,
        so the caller waits for ``running`` itself (``ready.wait_ready_async`` over ``get``: cancellable)
        and says each step. A row in state ``deleting`` is gone (the caller saw it vanish): it is
        recreated, in ``zone`` when given. ``Stockout`` when there is no capacity. Default: ``recover``."""
        return self.recover(row, zone=zone)

    def recover(self, row: Instance, *, zone: str | None = None) -> Recovery:
        """Bring a preempted (or stopped) row back (``RECOVER``): restart it where its disk
        outlives the stop, recreate it like itself otherwise (in ``zone`` when given: failover).
        Returns once it is ``running``; stock-outs raise ``CloudError`` (the caller backs off)."""
        raise Unsupported(row, "be recovered")

    def create_like(self, base: Instance, name: str, *, zone: str | None = None) -> Instance:
        """Make a new row ``name`` like ``base`` (``CREATE_LIKE``) and return it once ``running``."""
        raise Unsupported(base, "be copied")

    def price(self, row: Instance) -> float | None:
        """USD per hour while it runs (``PRICE``); None when unknown."""
        return row.usd_per_hour

    def workers(self, row: Instance) -> tuple[Worker, ...]:
        """The row's workers (a TPU node's hosts, a Vertex AI job's tasks, a workload's pods);
        empty for a single machine. Default: those the listing put on the row."""
        return row.workers

    def worker_rows(self, row: Instance) -> tuple[Instance, ...]:
        """For a row whose workers each run a shell (a TPU node's hosts): one row per worker, in rank
        order, named ``ROW/WORKER`` with ``parent`` set, that jobs, sync, logs and telemetry reach like
        any machine. Empty (the default) for a single machine, or workers without a shell."""
        return ()

    def exec_channel(self, row: Instance, worker: str | None = None) -> ExecChannel:
        """A channel that runs processes on ``row`` (``SHELL``): on the worker named ``worker``,
        or for a row with workers its first one (rank 0, where metrics and checkpoints live)."""
        raise Unsupported(row, "run a command")

    def ssh_target(self, row: Instance, user: str | None = None) -> SshTarget:
        """How to reach ``row`` (or its first worker) over SSH, for a row whose exec channel is SSH:
        address, port, user (``user``: the one OS Login dictates), key, host key alias."""
        raise Unsupported(row, "be reached over SSH")

    # Copies of a row (``CREATE_LIKE``, many at once): ``vm create --from``, the TUI's create form, a
    # sweep's ``vms = { from = BASE }``.
    def plan_copies(
        self, base: Instance, options: CreateOptions, say_image: Callable[[str], None] | None = None
    ) -> CopyPlan:
        """Read what copies of ``base`` are made from; ``say_image``: where its disk has no image, make
        one (minutes), saying each step (without it, such a base is refused in one line)."""
        raise Unsupported(base, "be copied")

    def copier(self, report: Report) -> Copier:
        """What makes the copies of a plan (``create_many``), each step heard by ``report``."""
        raise NotOffered(self.kind, "cannot copy rows")

    # Keys and identities: what the SSH pool and the keeper ask of a machine's provider.
    def published_host_keys(self, row: Instance) -> list[str]:
        """The SSH host keys the provider publishes for ``row`` (known_hosts key parts); empty when it
        publishes none (the explicit ``gcptui ssh accept`` stays the way in)."""
        return []

    def edit_ssh_keys(self, row: Instance, edit: KeyEdit) -> bool:
        """Apply ``edit`` to the SSH keys authorized on ``row`` alone (``INSTANCE_KEYS``); False when
        it changed nothing. A concurrent change is read again, never overwritten."""
        raise Unsupported(row, "hold SSH keys of its own")

    def edit_project_ssh_keys(self, edit: KeyEdit) -> bool:
        """Apply ``edit`` to the SSH keys authorized on every machine of the provider's project."""
        raise NotOffered(self.kind, "keeps no project-wide SSH keys")

    def service_account(self, row: Instance) -> str | None:
        """The e-mail of the identity ``row``'s machine acts as; None when it has none."""
        raise Unsupported(row, "act as a service account")

    def os_login(self) -> OsLogin | None:
        """The project's OS Login (its ``enable-oslogin``, the users it dictates); None where the
        kind's machines do not use it."""
        return None

    def uses_os_login(self) -> bool:
        """Whether this kind's machines may take their SSH user from OS Login: a pure answer (no
        credentials, no network), for choosing an SSH target before anything is read."""
        return False

    def google_identity(self) -> tuple[Any, str]:
        """(credentials, project) this backend's Google calls use, for an API it does not wrap (IAM)."""
        raise NotOffered(self.kind, "has no Google identity")

    def cloud_logs(self, row: Instance, *, task: str | None = None, settle_seconds: float) -> CloudLog:
        """``row``'s lines in the provider's log API (``CLOUD_LOGS``; ``task``: one worker's only),
        leaving lines younger than ``settle_seconds`` for the next poll (the API shows them late)."""
        raise Unsupported(row, "show lines from Cloud Logging")

    # Workloads (``CONTAINER_LOGS``): rows whose containers' command is the training.
    def pod_logs(self, row: Instance, *, follow: bool, tail: int | None) -> AsyncIterator[ContainerLine]:
        """The containers' own output of ``row``'s workers (a worker row: its own), merged as lines
        arrive, each followed across container restarts and its replacement (``CONTAINER_LOGS``)."""
        raise Unsupported(row, "show its containers' own output")

    def restart(self, row: Instance, image: str | None = None) -> None:
        """Recreate the workload's workers through its controller (``kubectl rollout restart``); with
        ``image``, rolled to that image (``kubectl set image``)."""
        raise Unsupported(row, "be restarted in place")

    def billing_nodes(self, row: Instance) -> Sequence[BillingNode]:
        """What keeps billing after ``row`` is deleted (the nodes its workers occupy). Default: nothing."""
        return ()
