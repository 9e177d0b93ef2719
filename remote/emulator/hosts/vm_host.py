"""What runs inside emulated VMs: loopback addresses, SSH and metadata servers, processes and disks.

``SshVmHost`` gives each VM a real SSH server on its own ``127.0.0.x`` address per boot;
``AddressOnlyHost`` (``ssh=False``) only hands out addresses, for large API-only fleets.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gcptui.remote.emulator.hosts.machine import Machine
from gcptui.remote.emulator.hosts.metadata import MetadataServer, publish_guest_attribute
from gcptui.remote.emulator.hosts.vm_disk import VmDisk, disk_root
from gcptui.remote.emulator.hosts.vm_image import image_environment, prepare_image
from gcptui.remote.emulator.hosts.vm_processes import MARKER, end_vm_processes
from gcptui.remote.emulator.hosts.vm_ssh import VmSshServer
from gcptui.remote.models import SSH_PORT_LABEL


class AddressPool:
    """Loopback addresses ``127.0.0.2`` upwards, each used once (a new address per boot, as on GCE)."""

    def __init__(self, first: int = 2) -> None:
        self._next = first

    def take(self) -> str:
        n = self._next
        self._next += 1
        b, c = divmod(n, 254)  # skip .0 and .255 in the last octet
        return f"127.0.{b}.{c + 1}" if b else f"127.0.0.{n}"


class AddressOnlyHost:
    """VMs without insides: boots only take an address (``Emulator(ssh=False)``)."""

    def __init__(self) -> None:
        self.addresses = AddressPool()

    def added(self, vm: Machine) -> None:
        pass

    def internal_address(self, n: int) -> str:
        """The ``n``-th VM's internal IP, as GCE's default subnet would give it (never reached)."""
        return f"10.128.{n // 250}.{n % 250 + 2}"

    async def boot(self, vm: Machine, address: str | None = None) -> str:
        return address or self.addresses.take()

    async def signal_preempted(self, vm: Machine) -> None:
        pass

    async def shutdown(self, vm: Machine, grace: float) -> None:
        pass

    async def removed(self, vm: Machine) -> None:
        pass

    def host_keys(self, vm: Machine) -> list[tuple[str, str]]:
        return []

    async def set_metadata(self, vm: Machine, path: str, value: str) -> None:
        pass

    async def close(self) -> None:
        pass


@dataclass
class _Machine:
    disk: VmDisk
    host_key: asyncssh.SSHKey
    ssh: VmSshServer | None = None
    metadata: MetadataServer | None = None


class SshVmHost:
    """Real insides: a disk under ``root/vms/NAME``, an SSH server and a metadata server per boot."""

    def __init__(
        self,
        root: Path,
        project: str,
        ssh_port: int,
        client_public_key: str,
        known_hosts: Path,
        *,
        one_address: bool = False,
    ) -> None:
        self.root = root
        self.project = project
        self.ssh_port = ssh_port
        # All VMs on 127.0.0.1, each on its own port: where 127.0.0.x aliases are missing (macOS).
        self.one_address = one_address
        self.known_hosts = known_hosts
        self.addresses = AddressPool()
        self.image_bin = prepare_image(root / "image")  # every VM's python3 and sudo (vm_image.py)
        self._client_key = asyncssh.import_public_key(client_public_key)
        # Set by the emulator: whether OS Login decides who logs in to a VM, and who may.
        self.oslogin_on: Callable[[Machine], bool] = lambda vm: False
        self.oslogin_allows: Callable[[str, bytes], bool] = lambda user, blob: False
        # Set by the emulator: the VM's ``ssh-keys`` metadata lines (its own and the project's), as
        # GCE's guest agent authorizes them (``USER:KEY COMMENT``).
        self.metadata_keys: Callable[[Machine], list[str]] = lambda vm: []
        self._machines: dict[str, _Machine] = {}
        self._vms: dict[str, Machine] = {}
        self._known_hosts_stale = False

    def added(self, vm: Machine) -> None:
        disk = VmDisk(disk_root(self.root / "vms", vm.name))
        vm.disk = disk.root
        self._machines[vm.uid] = _Machine(disk, disk.prepare(vm.gpus))
        self._vms[vm.uid] = vm
        # Written at the next boot, once for all the machines added since: a 64-worker TPU node
        # would otherwise rewrite the file 64 times, each time longer. Nobody reaches an unbooted VM.
        self._known_hosts_stale = True

    def _allows_for(self, vm: Machine) -> Callable[[str, asyncssh.SSHKey], bool]:
        def allows(username: str, key: asyncssh.SSHKey) -> bool:
            if self.oslogin_on(vm):  # metadata keys no longer count, as on a GCE image
                return self.oslogin_allows(username, key.public_data)
            if key.public_data == self._client_key.public_data:
                return True
            return any(_authorizes(line, username, key) for line in self.metadata_keys(vm))

        return allows

    def internal_address(self, n: int) -> str:
        """The ``n``-th VM's internal IP: a loopback address of its own (``127.1.x.y``) that its
        processes can listen on and the other VMs reach, as VMs reach each other on a VPC network;
        ``127.0.0.1`` where only that one exists (one-address mode: VMs tell each other apart by port)."""
        if self.one_address:
            return "127.0.0.1"
        b, c = divmod(n, 250)
        return f"127.1.{b}.{c + 2}"

    async def boot(self, vm: Machine, address: str | None = None) -> str:
        """Start the VM's servers on a new address, or first on ``address`` (a reset keeps its own)."""
        machine = self._machines[vm.uid]
        if self._known_hosts_stale:
            self._write_known_hosts()
        keep = address
        for _ in range(20):
            address = "127.0.0.1" if self.one_address else (keep or self.addresses.take())
            port = 0 if self.one_address else self.ssh_port
            if self.one_address and keep:
                port = int(vm.labels.get(SSH_PORT_LABEL, "0"))  # its port is its address here
            keep = None
            metadata = MetadataServer(self._metadata_values(vm))
            ssh = VmSshServer(
                machine.host_key, self._allows_for(vm), machine.disk.root, machine.disk.home,
                environment=self._environment(vm, machine.disk, metadata),
            )  # fmt: skip
            try:
                await metadata.start(address)
                port = await ssh.start(address, port)
            except OSError as err:
                await metadata.close()
                await ssh.close()
                if err.errno == errno.EADDRNOTAVAIL and not self.one_address:
                    # macOS configures only 127.0.0.1 on lo0: give every VM its own port there instead,
                    # published in the label the SSH layer reads (as a VM with sshd on another port).
                    self.one_address = True
                    for known in self._vms.values():
                        if known.network_ip.startswith("127.1."):
                            known.network_ip = "127.0.0.1"
                continue  # someone else holds this address and port (another emulator): next address
            machine.ssh, machine.metadata = ssh, metadata
            # The guest agent publishes the host key through the metadata server, as on GCE: the APIs
            # serve what the machine wrote, whatever that is.
            algorithm, key = machine.host_key.export_public_key("openssh").decode().split()[:2]
            await publish_guest_attribute(metadata.address, "hostkeys", algorithm, key)
            if self.one_address:
                vm.labels[SSH_PORT_LABEL] = str(port)
            else:
                vm.labels.pop(SSH_PORT_LABEL, None)
            return address
        raise OSError(f"no free loopback address for {vm.name}'s SSH port {self.ssh_port}")

    async def signal_preempted(self, vm: Machine) -> None:
        machine = self._machines.get(vm.uid)
        if machine and machine.metadata:
            await machine.metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
            await machine.metadata.set("instance/preempted", "TRUE")

    def host_keys(self, vm: Machine) -> list[tuple[str, str]]:
        """(key, value) of the VM's ``hostkeys/`` guest attributes as written to its metadata server
        (by its guest agent once booted, or by anything else on the VM): the VM's word, not checked."""
        machine = self._machines.get(vm.uid)
        if machine is None or machine.metadata is None:
            return []
        return [
            (k, v) for (ns, k), v in sorted(machine.metadata.guest_attributes.items()) if ns == "hostkeys"
        ]

    async def set_metadata(self, vm: Machine, path: str, value: str) -> None:
        """Change a value in the running VM's metadata server (e.g. a maintenance notice)."""
        machine = self._machines.get(vm.uid)
        if machine and machine.metadata:
            await machine.metadata.set(path, value)

    def reset_ssh(self, vm: Machine) -> int:
        """Drop the running VM's SSH connections (a fault knob); how many there were."""
        machine = self._machines.get(vm.uid)
        return machine.ssh.reset() if machine and machine.ssh else 0

    async def silence_metadata(self, vm: Machine, silent: bool) -> bool:
        """Make the running VM's metadata server stop answering, or answer again; whether it runs."""
        machine = self._machines.get(vm.uid)
        if machine is None or machine.metadata is None:
            return False
        await machine.metadata.silence(silent)
        return True

    async def shutdown(self, vm: Machine, grace: float) -> None:
        """ACPI soft-off (SIGTERM), ``grace`` seconds, power off (SIGKILL, servers gone)."""
        await end_vm_processes(vm.uid, grace)
        machine = self._machines.get(vm.uid)
        if machine is None:
            return
        if machine.ssh:
            await machine.ssh.close()
        if machine.metadata:
            await machine.metadata.close()
        machine.ssh = machine.metadata = None

    async def removed(self, vm: Machine) -> None:
        await self.shutdown(vm, 0.0)
        machine = self._machines.pop(vm.uid, None)
        self._vms.pop(vm.uid, None)
        if machine:
            machine.disk.destroy()
        self._write_known_hosts()

    async def close(self) -> None:
        """Power everything off; disks stay for the next run."""
        for vm in list(self._vms.values()):
            await self.shutdown(vm, 0.0)

    def _write_known_hosts(self) -> None:
        # gcloud's format: an alias (compute.<id>, tpu.<id>-<w>-<suffix>) stands for the host, whatever its address.
        lines = []
        for uid, vm in self._vms.items():
            algorithm, key = self._machines[uid].host_key.export_public_key("openssh").decode().split()[:2]
            lines.append(f"{vm.host_alias(key)} {algorithm} {key}\n")
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.known_hosts.with_suffix(".tmp")
        temporary.write_text("".join(lines))
        os.replace(temporary, self.known_hosts)
        self._known_hosts_stale = False

    def _metadata_values(self, vm: Machine) -> dict[str, str]:
        return {
            "instance/preempted": "FALSE",
            "instance/maintenance-event": "NONE",
            "instance/id": str(vm.id),
            "instance/name": vm.name,
            "instance/hostname": f"{vm.name}.{vm.zone}.c.{self.project}.internal",
            "instance/zone": f"projects/{self.project}/zones/{vm.zone}",
            "instance/machine-type": f"projects/{self.project}/machineTypes/{vm.machine_type}",
            "project/project-id": self.project,
        }

    def _environment(self, vm: Machine, disk: VmDisk, metadata: MetadataServer):  # type: ignore[no-untyped-def]
        host_path = [
            d for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if d and not os.path.exists(os.path.join(d, "nvidia-smi"))  # only the VM's own nvidia-smi
        ]  # fmt: skip
        # The image's bare python3 first; the laptop's interpreter as the image's ML ``python``.
        path = os.pathsep.join(
            [str(disk.bin), str(self.image_bin), os.path.dirname(sys.executable), *host_path]
        )

        def environment(username: str) -> dict[str, str]:
            return {
                "HOME": str(disk.home),
                "USER": username,
                "LOGNAME": username,
                "SHELL": "/bin/sh",
                "PATH": path,
                "LANG": os.environ.get("LANG", "C.UTF-8"),
                "GCE_METADATA_HOST": metadata.address,
                **image_environment(),
                MARKER: vm.uid,
            }

        return environment


def _authorizes(line: str, username: str, key: asyncssh.SSHKey) -> bool:
    """One ``ssh-keys`` line (``USER:TYPE BASE64 [COMMENT]``) authorizes ``key`` for ``username``."""
    user, _, public = line.strip().partition(":")
    if user != username or not public:
        return False
    try:
        return asyncssh.import_public_key(public).public_data == key.public_data
    except (asyncssh.KeyImportError, ValueError):
        return False
