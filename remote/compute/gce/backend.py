"""The Compute Engine backend: GCE instances of the configured project as fleet rows.

Reads go through the fleet's ``ComputeReader`` (JSON, no client library import); changes through
``GceClient`` (the client library, built on first use). GCE's status words map to ``State`` in
``gcptui.remote.cloud.states``; why a VM stopped comes from zone operations (a
``compute.instances.preempted``, host maintenance, a user's stop or delete).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar

from gcptui.remote.cloud.fleet import FleetSource, unreachable_notes
from gcptui.remote.cloud.instances import instance_from_resource, since_last_start
from gcptui.remote.cloud.recreate import recreate_body
from gcptui.remote.compute.backend import (
    SHARED_FLEET,
    Backend,
    BackendContext,
    Capability,
    Recovery,
    Rows,
    Unsupported,
)
from gcptui.remote.compute.ready import wait_ready
from gcptui.remote.errors import CloudError, GcptuiError, NotFoundError
from gcptui.remote.models import Instance, Source, State, StopCause
from gcptui.remote.ssh.target import SshTarget, target_for_instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.instances import DiskOrigin
    from gcptui.remote.compute.exec_channel import ExecChannel

DELETE_ACTION = "DELETE"  # instanceTerminationAction of a VM GCE deletes when it preempts it

_ALWAYS = frozenset(
    {Capability.SHELL, Capability.START, Capability.STOP, Capability.DELETE, Capability.RECOVER,
     Capability.CREATE_LIKE, Capability.PRICE}
)  # fmt: skip


class GceBackend(Backend):
    kind: ClassVar[Source] = "gce"

    def __init__(self, context: BackendContext, fleet: FleetSource) -> None:
        self.context = context
        self.fleet = fleet
        self.boot_timeout = 600.0
        self.poll_seconds = 1.0
        # What recreating a DELETE-action VM needs, recorded while it runs (``remember``): its
        # instance body and what its auto-delete disks were made from, gone with it after a preemption.
        self._records: dict[str, tuple[Any, dict[str, DiskOrigin]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def configured(cls, context: BackendContext) -> GceBackend | None:
        if context.config.gcp is None:
            return None
        fleet = context.shared.get(SHARED_FLEET)
        return cls(context, fleet if isinstance(fleet, FleetSource) else FleetSource(context.config))

    def list_rows(self) -> Rows:
        reader = self.fleet.reader()
        rows = self.fleet.priced(reader.list_instances())
        return Rows(tuple(rows), unreachable_notes(reader.unreachable))

    def capabilities(self, row: Instance) -> frozenset[Capability]:
        more: set[Capability] = set()
        if row.spot:
            more.add(Capability.PREEMPTIBLE)
        if row.termination_action != DELETE_ACTION:
            more.add(Capability.DISK_OUTLIVES)
        return _ALWAYS | more

    def get(self, row: Instance) -> Instance | None:
        raw = self.fleet.gce().get_raw(row.name, row.zone)
        return instance_from_resource(raw) if raw is not None else None

    def start(self, row: Instance) -> None:
        self.fleet.gce().start(row.name, row.zone)

    def stop(self, row: Instance) -> None:
        self.fleet.gce().stop(row.name, row.zone)

    def delete(self, row: Instance) -> None:
        self.fleet.gce().delete(row.name, row.zone)

    def why_stopped(self, row: Instance) -> StopCause:
        if row.state is State.PREEMPTED:
            return StopCause.PREEMPTED
        reader = self.fleet.reader()
        for operations, cause in (
            (reader.preemption_operations, StopCause.PREEMPTED),
            (reader.maintenance_operations, StopCause.HOST_MAINTENANCE),
            (reader.user_stop_operations, StopCause.USER),
        ):
            if row.name in since_last_start(operations(), [row]):
                return cause
        return StopCause.UNKNOWN

    def remember(self, row: Instance) -> None:
        """Record, while ``row`` runs, what recreating it needs (its body, its disks' origins)."""
        gce = self.fleet.gce()
        raw = gce.get_raw(row.name, row.zone)
        if raw is None:
            return
        with self._lock:
            self._records[row.name] = (raw, gce.disk_origins(raw))

    def recover(self, row: Instance, *, zone: str | None = None) -> Recovery:
        gce = self.fleet.gce()
        if gce.get_raw(row.name, row.zone) is not None:
            gce.start(row.name, row.zone)
            self.wait_running(row.name, row.zone)
            return Recovery.RESTARTED
        with self._lock:
            record = self._records.get(row.name)
        if record is None:
            raise GcptuiError(f"{row.name} was deleted before gcptui recorded it: recreate it by hand")
        raw, origins = record
        where = zone or row.zone
        gce.insert(where, recreate_body(raw, origins, where))
        self.wait_running(row.name, where)
        return Recovery.RECREATED

    def create_like(self, base: Instance, name: str, *, zone: str | None = None) -> Instance:
        from gcptui.remote.cloud.create import CreateOptions, boot_disk, boot_source, create_body

        gce = self.fleet.gce()
        raw = gce.get_raw(base.name, base.zone)
        settings = gce.get_json(base.name, base.zone)
        if raw is None or settings is None:
            raise NotFoundError(f"the base VM {base.name} is gone: `gcptui ls` shows the fleet")
        origin = gce.disk_origins(raw).get(boot_disk(settings).get("deviceName", ""))
        if origin is None:
            raise CloudError(f"cannot read the boot disk of {base.name} (disks.get): check your permissions")
        boot_source(origin, base.name)
        where = zone or base.zone
        gce.insert(where, create_body(settings, origin, name, CreateOptions(zone=where)))
        return self.wait_running(name, where)

    def wait_running(self, name: str, zone: str) -> Instance:
        """Poll until ``name`` runs with an address (``CloudError`` when it stops or times out)."""
        gce = self.fleet.gce()

        def read() -> Instance | None:
            raw = gce.get_raw(name, zone)
            return instance_from_resource(raw) if raw is not None else None

        return wait_ready(read, name, timeout=self.boot_timeout, pause=lambda _attempt: self.poll_seconds)

    def ssh_target(self, row: Instance, user: str | None = None) -> SshTarget:
        config = self.context.config
        return target_for_instance(row, config.ssh, base_dir=config.base_dir, user=user)

    def exec_channel(self, row: Instance, worker: str | None = None) -> ExecChannel:
        if self.context.connect is None:
            raise Unsupported(row, "run a command in this process (no SSH pool)")
        return self.context.connect(row)
