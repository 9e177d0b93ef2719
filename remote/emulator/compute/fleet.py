"""The emulated fleet's lifecycle: status transitions, zone operations, preemption.

Each lifecycle call records a zone operation and returns it at once (PENDING), as GCE does; the
transition runs as a task and the operation reaches DONE when it ends. What happens inside a VM
(SSH server, metadata server, processes) is delegated to a ``VmHost``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from gcptui.remote.aio import within
from gcptui.remote.emulator.compute.faults import Faults, stockout_errors
from gcptui.remote.emulator.compute.state import AttachedDisk, Disk, Operation, Vm, timestamp
from gcptui.remote.emulator.core.errors import ApiError, not_found

PREEMPTED = "compute.instances.preempted"
HOST_MAINTENANCE = "compute.instances.terminateOnHostMaintenance"
AUTOMATIC_RESTART = "compute.instances.automaticRestart"
# What an instance added by hand (not inserted) boots from, as GCE's public Debian image.
DEFAULT_IMAGE = (
    "https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/debian-12-bookworm-v20250101"
)
OPERATION_TTL = 3600.0  # GCE keeps completed operations for at least an hour, sometimes no longer


class VmHost(Protocol):
    """What runs inside the VMs: addresses, SSH and metadata servers, processes, disks."""

    def added(self, vm: Vm) -> None: ...
    def internal_address(self, n: int) -> str: ...
    async def boot(self, vm: Vm, address: str | None = None) -> str: ...
    async def signal_preempted(self, vm: Vm) -> None: ...
    async def shutdown(self, vm: Vm, grace: float) -> None: ...
    async def removed(self, vm: Vm) -> None: ...
    def host_keys(self, vm: Vm) -> list[tuple[str, str]]: ...
    async def set_metadata(self, vm: Vm, path: str, value: str) -> None: ...


@dataclass
class Timing:
    """How long transitions take: tests use tenths of seconds, the demo a few seconds."""

    boot_seconds: float = 0.3
    stop_seconds: float = 0.3
    preempt_grace_seconds: float = 3.0
    # Host maintenance of a VM that cannot live-migrate (GPUs): the metadata notice comes this long
    # before the host goes down (GCE gives up to an hour; the emulator is quicker).
    maintenance_notice_seconds: float = 1.0
    # VMs added already RUNNING (a fleet that was up before gcptui opened) come up in this long;
    # None: ``boot_seconds``. The demo shows its later starts at a watchable pace, not its first.
    initial_boot_seconds: float | None = None


class Fleet:
    """All instances and operations of one emulated project."""

    def __init__(self, project: str, host: VmHost, faults: Faults, timing: Timing, zones: list[str],
                 operation_ttl: float = OPERATION_TTL) -> None:  # fmt: skip
        self.project = project
        self.operation_ttl = operation_ttl
        self.disks: dict[tuple[str, str], Disk] = {}
        self.project_metadata: dict[str, str] = {}
        self.host = host
        self.faults = faults
        self.timing = timing
        self.known_zones = list(zones)
        self.vms: dict[tuple[str, str], Vm] = {}
        self.operations: dict[str, list[Operation]] = {}
        self._operations_by_name: dict[tuple[str, str], Operation] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._internal = 0
        self.changed = asyncio.Condition()  # notified on every status change, for waiters in tests

    # -- records ---------------------------------------------------------------------------------------

    @property
    def zones(self) -> list[str]:
        """Known zones: the configured ones plus any zone holding an instance, sorted."""
        return sorted(set(self.known_zones) | {zone for zone, _ in self.vms})

    def find(self, zone: str, name: str) -> Vm:
        vm = self.vms.get((zone, name))
        if vm is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/instances/{name}")
        return vm

    def by_name(self, name: str) -> Vm:
        """The instance called ``name`` in any zone (names are unique in the emulator's helpers)."""
        for vm in self.vms.values():
            if vm.name == name:
                return vm
        raise KeyError(f"no emulated instance named {name!r}")

    def expired(self, op: Operation) -> bool:
        """Completed operations are forgotten ``operation_ttl`` seconds after they end, as on GCE."""
        return op.ended is not None and time.time() - op.ended > self.operation_ttl

    def listed_operations(self, zone: str) -> list[Operation]:
        """The zone's operations GCE still lists (expired ones dropped)."""
        return [op for op in self.operations.get(zone, []) if not self.expired(op)]

    def disk(self, zone: str, name: str) -> Disk:
        found = self.disks.get((zone, name))
        if found is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/disks/{name}")
        return found

    def operation(self, zone: str, name: str) -> Operation:
        op = self._operations_by_name.get((zone, name))
        if op is None or self.expired(op):
            raise not_found(f"projects/{self.project}/zones/{zone}/operations/{name}")
        return op

    def _record(self, op: Operation) -> Operation:
        self.operations.setdefault(op.zone, []).append(op)
        self._operations_by_name[(op.zone, op.name)] = op
        return op

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _set_status(self, vm: Vm, status: str) -> None:
        vm.status = status
        async with self.changed:
            self.changed.notify_all()

    def add(self, vm: Vm) -> Vm:
        """Register an instance as it stands (no operation); a RUNNING one is booted in the background."""
        if vm.key in self.vms:
            raise ApiError(
                409,
                f"The resource 'projects/{self.project}/zones/{vm.zone}/instances/{vm.name}' already exists",
                "alreadyExists",
            )
        if not vm.disks:
            # Added by hand: give it the boot disk GCE would have made from a public image.
            if (vm.zone, vm.name) in self.disks:
                raise ApiError(
                    409, f"The resource 'projects/{self.project}/zones/{vm.zone}/disks/{vm.name}' already exists",
                    "alreadyExists",
                )  # fmt: skip
            size = 100 if vm.gpus else 10
            self.disks[(vm.zone, vm.name)] = Disk(
                vm.name, vm.zone, size, "pd-balanced", source_image=DEFAULT_IMAGE
            )
            vm.disks = [AttachedDisk(vm.name, vm.name, boot=True, auto_delete=True)]
        for attached in vm.disks:
            self.disks[(vm.zone, attached.disk)].users.append(vm.name)
        self._internal += 1
        vm.network_ip = vm.network_ip or self.host.internal_address(self._internal)
        self.vms[vm.key] = vm
        self.host.added(vm)
        if vm.status == "RUNNING":
            vm.status = "STAGING"
            self._spawn(self._boot_in_place(vm))
        return vm

    async def _boot_in_place(self, vm: Vm) -> None:
        async with vm.lock:
            try:
                await self._bring_up(vm, self.timing.initial_boot_seconds)
            except OSError as err:
                await self._set_status(vm, "TERMINATED")
                print(f"gcptui emulator: {vm.name} cannot boot: {err}", file=sys.stderr)

    # -- lifecycle -------------------------------------------------------------------------------------

    def _user_operation(self, vm: Vm, kind: str) -> Operation:
        return self._record(Operation(zone=vm.zone, operation_type=kind, target=vm.name, target_id=vm.id))

    def start(self, vm: Vm) -> Operation:
        op = self._user_operation(vm, "start")
        self._spawn(self._start(vm, op))
        return op

    def stop(self, vm: Vm) -> Operation:
        op = self._user_operation(vm, "stop")
        self._spawn(self._stop(vm, op))
        return op

    def reset(self, vm: Vm) -> Operation:
        if vm.status != "RUNNING":
            raise ApiError(
                400,
                f"The resource 'projects/{self.project}/zones/{vm.zone}/instances/{vm.name}' is not ready",
                "resourceNotReady",
            )
        op = self._user_operation(vm, "reset")
        self._spawn(self._reset(vm, op))
        return op

    def delete(self, vm: Vm) -> Operation:
        if vm.extra.get("deletionProtection") is True:  # set by its insert, echoed by instances.get
            raise ApiError(
                400, "Invalid resource usage: 'Resource cannot be deleted if it's protected against deletion.'",
                "invalidResourceUsage",
            )  # fmt: skip
        op = self._user_operation(vm, "delete")
        self._spawn(self._delete(vm, op))
        return op

    def insert(self, vm: Vm, disks: list[Disk] | None = None) -> Operation:
        """Create ``vm`` with the new ``disks`` its insert asked for (validated by ``inserts``)."""
        if vm.key in self.vms:
            self.add(vm)  # raises GCE's 409
        for disk in disks or []:
            self.disks[(disk.zone, disk.name)] = disk
        vm.status = "PROVISIONING"
        self.add(vm)
        op = self._user_operation(vm, "insert")
        self._spawn(self._start(vm, op))
        return op

    def simulate_maintenance_event(self, vm: Vm) -> Operation:
        """Spot/preemptible VMs are preempted; other VMs that cannot or may not live-migrate (GPUs,
        ``onHostMaintenance: TERMINATE``) terminate for maintenance; the rest migrate."""
        if vm.status != "RUNNING":
            raise ApiError(
                400,
                f"Instance '{vm.name}' is not running: a maintenance event needs a RUNNING instance.",
                "invalid",
            )
        op = self._user_operation(vm, "simulateMaintenanceEvent")
        if vm.spot:
            self._spawn(self._power_off(vm, PREEMPTED))
        elif vm.maintenance_policy == "TERMINATE":  # GPUs, or a VM made with TERMINATE
            self._spawn(self._host_maintenance(vm))
        else:
            self._record(
                Operation(
                    vm.zone, "compute.instances.migrateOnHostMaintenance", vm.name, vm.id, user="system"
                )
            ).finish()
        op.finish()
        return op

    def preempt(self, vm: Vm) -> None:
        """Preempt now, whatever the provisioning model (the test and demo hook)."""
        self._spawn(self._power_off(vm, PREEMPTED))

    async def _start(self, vm: Vm, op: Operation) -> None:
        async with vm.lock:
            op.running()
            if vm.status == "RUNNING" or vm.key not in self.vms:
                op.finish()
                return
            await asyncio.sleep(self.faults.take_delay())  # a slow operation (the fault knobs)
            if self.faults.take_stockout(vm.zone, vm.machine_type):
                await asyncio.sleep(self.timing.boot_seconds / 3)
                if op.operation_type == "insert":
                    await self._remove(vm)  # as on GCE, a failed insert leaves no VM and no new disk
                else:
                    await self._set_status(vm, "TERMINATED")
                op.finish(stockout_errors(self.project, vm.zone), (503, "SERVICE UNAVAILABLE"))
                return
            try:
                await self._bring_up(vm)
            except OSError as err:
                # The emulator could not give the VM its insides (no address to listen on): fail visibly.
                await self._set_status(vm, "TERMINATED")
                op.finish([{"code": "EMULATOR_BOOT_FAILED", "message": str(err)}], (500, "INTERNAL"))
                return
            op.finish()

    async def _bring_up(self, vm: Vm, seconds: float | None = None) -> None:
        third = (self.timing.boot_seconds if seconds is None else seconds) / 3
        await self._set_status(vm, "PROVISIONING")
        await asyncio.sleep(third)
        await self._set_status(vm, "STAGING")
        await asyncio.sleep(third)
        address = await self.host.boot(vm)
        vm.nat_ip = address if vm.external_ip else None
        if not vm.external_ip:
            # Without an external address the VM is reached on its internal one (as through a VPN).
            vm.network_ip = address
        await asyncio.sleep(third)
        vm.last_start = timestamp()
        await self._set_status(vm, "RUNNING")

    async def _go_down(self, vm: Vm, grace: float, minimum: float = 0.0) -> None:
        began = time.monotonic()
        await self._set_status(vm, "STOPPING")
        await self.host.shutdown(vm, grace)
        await asyncio.sleep(max(0.0, minimum - (time.monotonic() - began)))
        vm.nat_ip = None
        vm.last_stop = timestamp()
        await self._set_status(vm, "TERMINATED")

    async def _stop(self, vm: Vm, op: Operation) -> None:
        async with vm.lock:
            op.running()
            if vm.status not in ("TERMINATED",) and vm.key in self.vms:
                await self._go_down(vm, self.timing.stop_seconds, minimum=self.timing.stop_seconds)
            op.finish()

    async def _reset(self, vm: Vm, op: Operation) -> None:
        """A hard reset (no grace). GCE: "Throughout this process, the VM remains in the RUNNING
        state": nothing is stopped, so it keeps its addresses."""
        async with vm.lock:
            op.running()
            await self.host.shutdown(vm, 0.0)
            try:
                address = await self.host.boot(vm, vm.nat_ip if vm.external_ip else vm.network_ip)
            except OSError as err:
                await self._set_status(vm, "TERMINATED")
                op.finish([{"code": "EMULATOR_BOOT_FAILED", "message": str(err)}], (500, "INTERNAL"))
                return
            if vm.external_ip:
                vm.nat_ip = address
            else:
                vm.network_ip = address
            op.finish()

    async def _delete(self, vm: Vm, op: Operation) -> None:
        async with vm.lock:
            op.running()
            if vm.key in self.vms:
                if vm.status != "TERMINATED":
                    await self._go_down(vm, self.timing.stop_seconds)
                await self._remove(vm)
            op.finish()

    async def _remove(self, vm: Vm) -> None:
        self.vms.pop(vm.key, None)
        for attached in vm.disks:
            disk = self.disks.get((vm.zone, attached.disk))
            if disk is None:
                continue
            disk.users = [user for user in disk.users if user != vm.name]
            if attached.auto_delete and not disk.users:
                del self.disks[(vm.zone, attached.disk)]
        await self.host.removed(vm)
        async with self.changed:
            self.changed.notify_all()

    async def _power_off(self, vm: Vm, event: str) -> None:
        """GCE's preemption: metadata flips, ACPI soft-off (SIGTERM), grace, hard off, system operation."""
        async with vm.lock:
            if vm.status != "RUNNING" or vm.key not in self.vms:
                return
            op = self._record(Operation(vm.zone, event, vm.name, vm.id, user="system"))
            op.running()
            await self.host.signal_preempted(vm)
            await self._go_down(vm, self.timing.preempt_grace_seconds)
            op.finish()
            if event == PREEMPTED and vm.termination_action == "DELETE":
                await self._remove(vm)

    async def _host_maintenance(self, vm: Vm) -> None:
        """A GPU VM's host goes down: ``maintenance-event`` notice, soft-off, and GCE restarts it when
        ``automaticRestart`` is on (an on-demand VM's default)."""
        await self.host.set_metadata(vm, "instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        await asyncio.sleep(self.timing.maintenance_notice_seconds)
        async with vm.lock:
            if vm.status != "RUNNING" or vm.key not in self.vms:
                return
            op = self._record(Operation(vm.zone, HOST_MAINTENANCE, vm.name, vm.id, user="system"))
            op.running()
            await self._go_down(vm, self.timing.preempt_grace_seconds)
            op.finish()
            if not vm.restarts_automatically:
                return
            restart = self._record(Operation(vm.zone, AUTOMATIC_RESTART, vm.name, vm.id, user="system"))
            restart.running()
            try:
                await self._bring_up(vm)
            except OSError as err:
                await self._set_status(vm, "TERMINATED")
                restart.finish([{"code": "EMULATOR_BOOT_FAILED", "message": str(err)}], (500, "INTERNAL"))
                return
            restart.finish()

    # -- waiting and shutdown --------------------------------------------------------------------------

    async def wait_for(self, name: str, status: str | None, timeout: float = 30.0) -> None:
        """Until instance ``name`` reads ``status`` (None: until it is gone)."""

        def reached() -> bool:
            vm = next((v for v in self.vms.values() if v.name == name), None)
            return vm is None if status is None else (vm is not None and vm.status == status)

        async with self.changed:
            await within(timeout, self.changed.wait_for(reached))

    async def settle(self, timeout: float = 60.0) -> None:
        """Until no transition is in flight (every boot, stop and preemption finished)."""
        async with asyncio.timeout(timeout):
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel transitions in flight (the host then tears every VM down)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
