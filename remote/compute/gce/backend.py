"""The Compute Engine backend: GCE instances of the configured project as fleet rows.

Reads go through the fleet's ``ComputeReader`` (JSON, no client library import): listings, the zone
operations that say why a VM stopped (a ``compute.instances.preempted``, host maintenance, a user's
stop or delete), what a DELETE-action VM's disks were made from. Changes go through ``GceClient``
(the client library, built on first use: ``prepare_to_act``). GCE's status words map to ``State`` in
``gcptui.remote.cloud.states``. Keep-alive watches GCE through this class alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from gcptui.remote.cloud.fleet import FleetSource, unreachable_notes
from gcptui.remote.cloud.instances import instance_from_resource, since_last_start
from gcptui.remote.cloud.recreate import recreate_body
from gcptui.remote.compute.backend import (
    RECORDED_CAUSES,
    SHARED_FLEET,
    Backend,
    BackendContext,
    Capability,
    KeyEdit,
    Recovery,
    Rows,
    Stockout,
    Stop,
    Unsupported,
)
from gcptui.remote.compute.ready import wait_ready
from gcptui.remote.errors import CloudError, GcptuiError, NotFoundError
from gcptui.remote.models import GKE_NODE_LABEL, Instance, Source, State, StopCause
from gcptui.remote.ssh.target import SshTarget, target_for_instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.compute_rest import ComputeReader
    from gcptui.remote.cloud.create import CreateOptions
    from gcptui.remote.cloud.instances import DiskOrigin, Preemption
    from gcptui.remote.cloud.oslogin import OsLogin
    from gcptui.remote.compute.copies import Copier, CopyPlan, Report
    from gcptui.remote.compute.exec_channel import ExecChannel

log = logging.getLogger(__name__)

DELETE_ACTION = "DELETE"  # instanceTerminationAction of a VM GCE deletes when it preempts it


@dataclass(frozen=True, slots=True)
class _Record:
    """What recreating a DELETE-action VM needs, read while it ran: gone with it after a preemption."""

    instance_id: str
    raw: dict[str, Any]  # its instance JSON, as last listed
    origins: dict[str, DiskOrigin] | None  # what its disks were made from (None: not read yet)


def _operations(reader: ComputeReader, cause: StopCause) -> Callable[[], list[Preemption]]:
    """The zone operations that record ``cause`` (one aggregated listing each; users' stops three)."""
    return {
        StopCause.PREEMPTED: reader.preemption_operations,
        StopCause.HOST_MAINTENANCE: reader.maintenance_operations,
        StopCause.USER: reader.user_stop_operations,
    }[cause]


_ALWAYS = frozenset(
    {Capability.SHELL, Capability.START, Capability.STOP, Capability.DELETE, Capability.RECOVER,
     Capability.CREATE_LIKE, Capability.PRICE, Capability.SIMULATE_MAINTENANCE, Capability.INSTANCE_KEYS,
     Capability.STOPS_RECORDED}
)  # fmt: skip


class GceBackend(Backend):
    kind: ClassVar[Source] = "gce"
    listed_by_fleet: ClassVar[bool] = True
    recovers_rows: ClassVar[bool] = True

    def __init__(self, context: BackendContext, fleet: FleetSource) -> None:
        self.context = context
        self.fleet = fleet
        self.boot_timeout = 600.0
        self.poll_seconds = 1.0
        # What recreating a DELETE-action VM needs, recorded while it runs (``remember``), by name.
        self._records: dict[str, _Record] = {}
        self._listed: dict[str, dict[str, Any]] = {}  # the last ``watch_rows``' JSON, by name
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
        if GKE_NODE_LABEL in row.labels:
            # A GKE node's instance: its cluster recovers it and its workloads are the rows gcptui acts
            # on; a maintenance event on it is how GKE Spot preemption is tested.
            return frozenset({Capability.PRICE, Capability.SIMULATE_MAINTENANCE})
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

    def simulate_maintenance(self, row: Instance) -> None:
        self.fleet.gce().simulate_maintenance_event(row.name, row.zone)

    def watch_rows(self) -> Rows:
        """One aggregated listing as JSON (no prices, no preemption lookup: a preempted VM reads
        ``stopped``); its JSON is kept for ``remember``."""
        from gcptui.remote.cloud.instances_json import instance_from_json

        reader = self.fleet.reader()
        # GKE nodes' instances are their clusters' to recover (GKE_NODE_LABEL): never watched here.
        raws = [raw for raw in reader.list_json() if GKE_NODE_LABEL not in (raw.get("labels") or {})]
        with self._lock:
            self._listed = {str(raw.get("name", "")): raw for raw in raws}
        return Rows(tuple(instance_from_json(raw) for raw in raws), unreachable_notes(reader.unreachable))

    def why_stopped(self, row: Instance) -> StopCause:
        if row.state is State.PREEMPTED:
            return StopCause.PREEMPTED
        found = self.why_stopped_many([row])
        return found[row.name].cause if row.name in found else StopCause.UNKNOWN

    def why_stopped_many(
        self, rows: Sequence[Instance], *, causes: Collection[StopCause] = RECORDED_CAUSES
    ) -> dict[str, Stop]:
        """From the zone operations newer than each row's last start: a preemption first, then host
        maintenance, then a user's stop, suspend or delete; one listing per cause asked for, and only
        while some row is still unexplained."""
        reader = self.fleet.reader()
        found: dict[str, Stop] = {}
        for cause in (StopCause.PREEMPTED, StopCause.HOST_MAINTENANCE, StopCause.USER):
            left = [r for r in rows if r.name not in found]
            if cause not in causes or not left:
                continue
            for name, at in since_last_start(_operations(reader, cause)(), left).items():
                found[name] = Stop(cause, at)
        return found

    def remember(self, row: Instance) -> bool:
        """Its JSON (from the last ``watch_rows``, else read now) and, once per instance id, what its
        disks were made from (``disks.get``; a refusal is logged and read again at the next call)."""
        with self._lock:
            raw = self._listed.get(row.name)
            known = self._records.get(row.name)
        if raw is None or str(raw.get("id", "")) != (row.instance_id or ""):
            raw = self.fleet.gce().get_json(row.name, row.zone)
            if raw is None:
                return known is not None
        instance_id = str(raw.get("id", ""))
        origins = known.origins if known is not None and known.instance_id == instance_id else None
        if origins is None:
            try:
                origins = self.fleet.reader().disk_origins(raw)
            except GcptuiError as err:
                log.warning("cannot read the disks of %s (needed to recreate it): %s", row.name, err)
                if known is not None and known.origins is not None:
                    # Its predecessor's (a VM made anew like it) until a read succeeds: read again next
                    # call, as the id kept is the predecessor's (the fault campaign's seed 13).
                    instance_id, origins = known.instance_id, known.origins
        with self._lock:
            self._records[row.name] = _Record(instance_id, raw, origins)
        return True

    def prepare_to_act(self) -> None:
        self.fleet.gce()

    def begin_recovery(self, row: Instance, *, zone: str | None = None) -> Recovery:
        """Start it, or (a ``deleting`` row: gone) insert it anew from its record: the same settings on
        FRESH disks made from what the old ones were made from, in ``zone`` when given."""
        from gcptui.remote.cloud.errors import StockoutError

        gce = self.fleet.gce()
        try:
            if row.state is not State.DELETING:
                gce.start(row.name, row.zone)
                return Recovery.RESTARTED
            with self._lock:
                record = self._records.get(row.name)
            if record is None:
                raise GcptuiError(f"{row.name} was deleted before gcptui saw it run: recreate it by hand")
            where = zone or row.zone
            gce.insert(where, recreate_body(gce.instance_message(record.raw), record.origins, where))
            return Recovery.RECREATED
        except StockoutError as err:
            raise Stockout(str(err)) from err

    def recover(self, row: Instance, *, zone: str | None = None) -> Recovery:
        if row.state is not State.DELETING and self.fleet.gce().get_raw(row.name, row.zone) is None:
            row = replace(row, state=State.DELETING)  # gone since it was listed: made anew
        how = self.begin_recovery(row, zone=zone)
        self.wait_running(row.name, (zone or row.zone) if how is Recovery.RECREATED else row.zone)
        return how

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

    def plan_copies(
        self, base: Instance, options: CreateOptions, say_image: Callable[[str], None] | None = None
    ) -> CopyPlan:
        from gcptui.remote.compute.gce.copies import image_maker, plan_create

        gce = self.fleet.gce()
        return plan_create(gce, base, options, image_maker(gce, base, say_image) if say_image else None)

    def copier(self, report: Report) -> Copier:
        from gcptui.remote.compute.gce.copies import VmCreator

        return VmCreator(self.fleet.gce(), self.context.config, report)

    def published_host_keys(self, row: Instance) -> list[str]:
        """Its ``hostkeys/`` guest attributes (none when they are off)."""
        return self.fleet.gce().guest_host_keys(row.name, row.zone)

    def edit_ssh_keys(self, row: Instance, edit: KeyEdit) -> bool:
        from gcptui.remote.compute.gce.keys import edit_instance_keys

        return edit_instance_keys(self.fleet.gce(), self._endpoint(), row.name, row.zone, edit)

    def edit_project_ssh_keys(self, edit: KeyEdit) -> bool:
        from gcptui.remote.compute.gce.keys import edit_project_keys

        return edit_project_keys(self.fleet.gce(), self._endpoint(), edit)

    def service_account(self, row: Instance) -> str | None:
        """From the aggregated listing's ``serviceAccounts`` (what the API says, not what the VM says)."""
        for raw in self.fleet.reader().list_json():
            if raw.get("name") == row.name and str(raw.get("zone", "")).rsplit("/", 1)[-1] == row.zone:
                emails = [str(a.get("email") or "") for a in raw.get("serviceAccounts") or []]
                found = next((e for e in emails if "@" in e), None)
                return found if found is not None and len(found) <= 254 else None
        return None

    def os_login(self) -> OsLogin | None:
        self.fleet.reader()  # builds the project's OsLogin with the reader's credentials
        return self.fleet.oslogin

    def uses_os_login(self) -> bool:
        return True

    def google_identity(self) -> tuple[Any, str]:
        gce = self.fleet.gce()
        return gce.credentials, gce.project

    def _endpoint(self) -> str:
        gcp = self.context.config.gcp
        return gcp.api_endpoint if gcp is not None else ""
