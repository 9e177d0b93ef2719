"""The Cloud TPU backend: the TPU VM nodes of ``[tpu] zones`` as fleet rows.

A node is one row; its worker hosts are its ``workers`` (``w0``, ``w1``, ...), each reached by SSH
at its own address with its host key pinned from the node's guest attributes under gcloud's alias
(``tpu.<node id>-<worker>-<last 6 characters of the ed25519 key>``), so ``gcloud compute tpus tpu-vm
ssh`` and gcptui trust the same keys. Reads and changes are plain JSON over google-auth's session
(the TPU API's paths on ``tpu.googleapis.com``, or on ``[gcp] api_endpoint`` for the emulator), so
listing TPUs imports no client library. A preempted Spot node cannot be started again: recovery
deletes it and creates it anew like itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gcptui.remote.backoff import Backoff
from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.compute.backend import (
    SHARED_FLEET,
    Backend,
    BackendContext,
    Capability,
    Recovery,
    Rows,
    Unsupported,
)
from gcptui.remote.compute.control import ask_to_preempt, control_endpoint
from gcptui.remote.compute.tpu.api import TpuRest
from gcptui.remote.compute.tpu.nodes import (
    node_row,
    recreate_body,
    worker_alias,
    worker_row,
)
from gcptui.remote.compute.tpu.prices import tpu_price
from gcptui.remote.compute.tpu.states import PREEMPTED, READY
from gcptui.remote.errors import CloudError, GcptuiError
from gcptui.remote.models import Instance, Source, State, StopCause
from gcptui.remote.safe_text import one_line as clean_line
from gcptui.remote.ssh.target import target_for_instance

if TYPE_CHECKING:
    from gcptui.remote.compute.exec_channel import ExecChannel
    from gcptui.remote.ssh.target import SshTarget

_ALWAYS = frozenset({Capability.SHELL, Capability.DELETE, Capability.RECOVER, Capability.PRICE,
                     Capability.CREATE_LIKE})  # fmt: skip


class TpuBackend(Backend):
    kind: ClassVar[Source] = "tpu"
    recovers_rows: ClassVar[bool] = True

    def __init__(self, context: BackendContext, fleet: FleetSource) -> None:
        self.context = context
        self.fleet = fleet
        self.zones = list(context.config.tpu.zones)
        self.boot_timeout = 900.0  # a multi-host slice can take minutes to come up
        self.poll_seconds = 1.0
        self._rest: TpuRest | None = None
        self._lock = threading.Lock()
        self._raw: dict[tuple[str, str], dict[str, Any]] = {}  # (zone, name) -> the node as last listed
        self._keys: dict[str, list[tuple[str, str]]] = {}  # node id -> each worker's ed25519 key

    @classmethod
    def configured(cls, context: BackendContext) -> TpuBackend | None:
        if context.config.gcp is None or not context.config.tpu.zones:
            return None
        fleet = context.shared.get(SHARED_FLEET)
        return cls(context, fleet if isinstance(fleet, FleetSource) else FleetSource(context.config))

    def rest(self) -> TpuRest:
        with self._lock:
            if self._rest is None:
                reader = self.fleet.reader()  # one set of credentials and one project per process
                gcp = self.context.config.gcp
                assert gcp is not None
                self._rest = TpuRest(reader.credentials, gcp.api_endpoint, reader.project)
            return self._rest

    # -- rows ------------------------------------------------------------------------------------------

    def list_rows(self) -> Rows:
        rows: list[Instance] = []
        errors: list[str] = []
        for zone in self.zones:
            try:
                nodes = self.rest().list_nodes(zone)
            except GcptuiError as err:
                errors.append(f"TPU nodes of {zone} not listed: {err}")
                continue
            for raw in nodes:
                row = node_row(raw, zone)
                if row is None:
                    continue  # a node whose JSON we cannot read is not guessed at
                with self._lock:
                    self._raw[(zone, row.name)] = raw
                rows.append(self._priced(self._with_aliases(row)))
        return Rows(tuple(rows), tuple(errors))

    def _priced(self, row: Instance) -> Instance:
        price = tpu_price(row.machine_type, row.zone, spot=row.spot)
        if price is None:
            return row
        return replace(row, usd_per_hour=price.usd_per_hour, price_source="fallback", price_as_of=price.as_of)

    def _with_aliases(self, row: Instance) -> Instance:
        """Pin each worker's host key (read once per node id) so SSH verifies it; each worker carries
        its alias, and the row worker 0's."""
        if row.state is not State.RUNNING or not row.instance_id:
            return row
        keys = self._keys.get(row.instance_id)
        if keys is None:
            try:
                keys = self.rest().host_keys(row.zone, row.name)
            except GcptuiError:
                return row  # the next listing tries again; SSH refuses an unknown key meanwhile
            if len(keys) == len(row.workers):
                # Kept only once every worker has published its key: a node listed while its workers
                # still boot is read again at the next listing, not left unpinned for good.
                with self._lock:
                    self._keys[row.instance_id] = keys
            known_hosts = self._known_hosts()
            from gcptui.remote.ssh.host_keys import pin_host_keys

            for index, (algorithm, key) in enumerate(keys):
                pin_host_keys(known_hosts, worker_alias(row.instance_id, index, key), [f"{algorithm} {key}"])
        if not keys or len(keys) != len(row.workers):
            return row
        assert row.instance_id is not None
        workers = tuple(
            replace(w, host_key_alias=worker_alias(row.instance_id, i, key))
            for i, (w, (_, key)) in enumerate(zip(row.workers, keys, strict=True))
        )
        return replace(row, workers=workers, host_key_alias=workers[0].host_key_alias)

    def _known_hosts(self) -> Path:
        config = self.context.config
        path = Path(config.ssh.known_hosts).expanduser()
        return path if path.is_absolute() else config.base_dir / path

    def capabilities(self, row: Instance) -> frozenset[Capability]:
        more: set[Capability] = set()
        if row.spot:
            more.add(Capability.PREEMPTIBLE)
            if control_endpoint(self.context.config) and row.parent is None:
                more.add(Capability.SIMULATE_MAINTENANCE)  # no TPU API call: an emulator's control path
        else:
            # Only an on-demand node can be stopped and started again, keeping its disks.
            more |= {Capability.START, Capability.STOP, Capability.DISK_OUTLIVES}
        return _ALWAYS | more

    def get(self, row: Instance) -> Instance | None:
        raw = self.rest().get_node(row.zone, row.name)
        if raw is None:
            return None
        with self._lock:
            self._raw[(row.zone, row.name)] = raw
        found = node_row(raw, row.zone)
        return self._with_aliases(found) if found is not None else None

    # -- lifecycle -------------------------------------------------------------------------------------

    def simulate_maintenance(self, row: Instance) -> None:
        """Preempt the Spot node now, through the control path (``control.py``)."""
        if not self.can(row, Capability.SIMULATE_MAINTENANCE):
            super().simulate_maintenance(row)
        ask_to_preempt(self.fleet, f"projects/{self.fleet.project()}/locations/{row.zone}/nodes/{row.name}")

    def start(self, row: Instance) -> None:
        if not self.can(row, Capability.START):
            raise Unsupported(row, "be started (a Spot TPU node is recreated instead: `gcptui vm start` after it "
                                   "is deleted, or let keep-alive recover it)")  # fmt: skip
        self.rest().act(row.zone, row.name, "start")

    def stop(self, row: Instance) -> None:
        if not self.can(row, Capability.STOP):
            raise Unsupported(row, "be stopped (a Spot TPU node can only be deleted)")
        self.rest().act(row.zone, row.name, "stop")

    def delete(self, row: Instance) -> None:
        self.rest().delete_node(row.zone, row.name)

    def why_stopped(self, row: Instance) -> StopCause:
        if row.status == PREEMPTED or row.state is State.PREEMPTED:
            return StopCause.PREEMPTED
        if row.state is State.STOPPED:
            return StopCause.USER  # only a user's stop (or gcptui's) leaves a node STOPPED
        return StopCause.UNKNOWN

    def recover(self, row: Instance, *, zone: str | None = None) -> Recovery:
        """A STOPPED node is started; a PREEMPTED or TERMINATED one (which cannot start again and
        holds its quota until deleted) is deleted and created anew like itself, in ``zone`` if given."""
        rest = self.rest()
        raw = rest.get_node(row.zone, row.name)
        if raw is not None and raw.get("state") == "STOPPED":
            rest.act(row.zone, row.name, "start")
            self.wait_ready(row.name, row.zone)
            return Recovery.RESTARTED
        with self._lock:
            known = raw or self._raw.get((row.zone, row.name))
        if known is None:
            raise GcptuiError(
                f"{row.name} is gone and gcptui never saw how it was made: create it again by hand"
            )
        if raw is not None:
            rest.delete_node(row.zone, row.name)
        target = zone or row.zone
        self._create_again(rest, target, row.name, recreate_body(known))
        self.wait_ready(row.name, target)
        return Recovery.RECREATED

    def _create_again(self, rest: TpuRest, zone: str, name: str, body: dict[str, Any]) -> None:
        """Create a deleted node anew through stock-outs and refusals that pass (429, 5xx): deleted, it
        is in no listing any more, so a recovery that gave up here would leave it gone for good (the
        fault campaign's seeds 11 and 12). Permission errors, and the boot timeout, end it."""
        pauses, deadline = Backoff(1.0, 30.0), time.monotonic() + self.boot_timeout
        while True:
            try:
                rest.create_node(zone, name, body)
                return
            except CloudError as err:
                if "Permission denied" in str(err) or time.monotonic() > deadline:
                    raise
            with contextlib.suppress(CloudError):  # a read refused too: try the create again
                if rest.get_node(zone, name) is not None:
                    return  # made after all (the refusal came after the fact): wait_ready follows it
            time.sleep(pauses.pause())

    def create_like(self, base: Instance, name: str, *, zone: str | None = None) -> Instance:
        with self._lock:
            known = self._raw.get((base.zone, base.name))
        if known is None:
            known = self.rest().get_node(base.zone, base.name)
        if known is None:
            raise CloudError(f"TPU node {base.name} not found in {base.zone}: check `gcptui ls`")
        target = zone or base.zone
        self.rest().create_node(target, name, recreate_body(known))
        return self.wait_ready(name, target)

    def wait_ready(self, name: str, zone: str) -> Instance:
        """Poll until node ``name`` is READY with every worker's address (``CloudError`` otherwise)."""
        deadline = time.monotonic() + self.boot_timeout
        while True:
            raw = self.rest().get_node(zone, name)
            row = node_row(raw, zone) if raw is not None else None
            if (
                row is not None
                and row.status == READY
                and row.workers
                and all(w.address for w in row.workers)
            ):
                return self._with_aliases(row)
            if row is not None and row.state.down:
                raise CloudError(
                    f"TPU node {name} went {clean_line(row.status)} while starting: see `gcptui ls`"
                )
            if time.monotonic() > deadline:
                raise CloudError(
                    f"TPU node {name} was not READY within {self.boot_timeout:.0f}s: see `gcptui ls`"
                )
            time.sleep(self.poll_seconds)

    # -- workers ---------------------------------------------------------------------------------------

    def worker_rows(self, row: Instance) -> tuple[Instance, ...]:
        """One SSH-reachable row per worker host (``NODE/w0``, ``NODE/w1``, ...), rank order: a pure
        function of the row as listed (its workers carry their addresses and host key aliases)."""
        return tuple(worker_row(row, index) for index in range(len(row.workers)))

    def ssh_target(self, row: Instance, user: str | None = None) -> SshTarget:
        """A worker row's target (``NODE/wN``: its address, its pinned alias); a node row's is worker 0's."""
        if row.workers:
            workers = self.worker_rows(row)
            if not workers:
                raise GcptuiError(f"{row.name} has no worker hosts up (state {clean_line(row.status)})")
            row = workers[0]
        if row.host_key_alias is None:
            # Never the GCE alias (compute.<id>): a TPU worker's keys come from the TPU API's guest
            # attributes, read when the node is listed READY.
            raise GcptuiError(
                f"{row.name}: its host keys are not read yet (the node is still coming up): try again"
            )
        config = self.context.config
        return target_for_instance(row, config.ssh, base_dir=config.base_dir, user=user)

    def exec_channel(self, row: Instance, worker: str | None = None) -> ExecChannel:
        if self.context.connect is None:
            raise Unsupported(row, "run a command in this process (no SSH pool)")
        if row.parent is not None:  # a worker's own row (NODE/wN): its SSH host
            return self.context.connect(row)
        workers = self.worker_rows(row)
        if not workers:
            raise GcptuiError(f"{row.name} has no worker hosts up (state {clean_line(row.status)})")
        if worker is None:
            return self.context.connect(workers[0])
        for candidate, listed in zip(workers, row.workers, strict=True):
            if worker in (listed.name, candidate.name):
                return self.context.connect(candidate)
        raise GcptuiError(f"{row.name} has no worker {worker!r}: its workers are "
                          f"{', '.join(w.name for w in row.workers)}")  # fmt: skip
