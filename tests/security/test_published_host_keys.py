"""A VM or TPU worker writes its own ``hostkeys/`` guest attribute: a hostile one cannot pin a key for
any other host. The hostile value is written from inside the emulated machine through its metadata
server (``PUT .../guest-attributes/hostkeys/ssh-ed25519``), as the guest agent writes it on GCE."""

from __future__ import annotations

import asyncio
import getpass
import logging
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from gcptui.remote.cloud.published_keys import published_host_key
from gcptui.remote.compute.tpu.backend import TpuBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.models import SSH_PORT_LABEL
from gcptui.remote.services import Services
from gcptui.remote.ssh.host_keys import KnownHostsLookup, pin_host_keys
from tests.helpers.emulator import gce_for

ZONE = "us-central1-a"
GUEST_ATTRIBUTES = {"enable-guest-attributes": "TRUE"}
# What the machine writes, with OWN its real key and ATTACKER another: every form of a second line.
HOSTILE = [
    "{own}\n* ssh-ed25519 {attacker}",
    "{own}\n@cert-authority * ssh-ed25519 {attacker}",
    "{own}\n@revoked * ssh-ed25519 {own}",
    "{own} \n* ssh-ed25519 {attacker}",
    "{own}\r* ssh-ed25519 {attacker}",
    "{own} * ssh-ed25519 {attacker}",
    "{own}\t{attacker}",
    "{own}\x1b[2J",
]
PUT = (
    "import os, sys, urllib.request as u; u.urlopen(u.Request("
    "'http://' + os.environ['GCE_METADATA_HOST'] + '/computeMetadata/v1/instance/guest-attributes/hostkeys/ssh-ed25519',"
    " data=sys.stdin.buffer.read(), method='PUT', headers={'Metadata-Flavor': 'Google'}), timeout=10)"
)


def _blob(key: asyncssh.SSHKey) -> str:
    return key.export_public_key("openssh").decode().split()[1]


async def _write_from_inside(emu: Emulator, address: str, port: int, alias: str, value: str) -> None:
    """Run a process on the machine that writes ``value`` as its ed25519 host key attribute."""
    async with asyncssh.connect(
        address, port=port, username=getpass.getuser(), client_keys=[str(emu.client_key)],
        known_hosts=str(emu.known_hosts), host_key_alias=alias, agent_path=None, config=None, connect_timeout=10,
    ) as conn:  # fmt: skip
        result = await conn.run(f"python3 -c {shlex.quote(PUT)}", input=value, check=False, timeout=20)
        assert result.exit_status == 0, result.stderr


async def _connects(address: str, port: int, known_hosts: Path, alias: str) -> bool:
    """Whether an SSH client that trusts ``known_hosts`` accepts the host at ``address`` as ``alias``:
    through the pool's own lookup, and through asyncssh's reading of the file (as ssh/gcloud read it)."""
    accepted = []
    known_hosts.touch()
    for trusted in (KnownHostsLookup(known_hosts, alias), str(known_hosts)):
        try:
            async with asyncssh.connect(
                address, port=port, username="nobody", known_hosts=trusted, host_key_alias=alias,
                client_keys=None, password="x", agent_path=None, config=None, connect_timeout=10,
            ):  # fmt: skip
                accepted.append(True)
        except asyncssh.HostKeyNotVerifiable:
            accepted.append(False)
        except asyncssh.PermissionDenied:
            accepted.append(True)  # the host key was accepted; only the login failed
    assert len(set(accepted)) == 1, accepted
    return accepted[0]


@pytest.fixture
async def attacker_host() -> AsyncIterator[asyncssh.SSHAcceptor]:
    """Another host on loopback, serving the attacker's host key (a man in the middle)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.listen("127.0.0.1", 0, server_host_keys=[key], reuse_address=True)
    server.key = key  # type: ignore[attr-defined]
    yield server
    server.close()
    await server.wait_closed()


def _pinned_only_under(known_hosts: Path, alias: str) -> list[str]:
    lines = known_hosts.read_text().splitlines() if known_hosts.exists() else []
    for line in lines:
        fields = line.split(" ")
        assert len(fields) == 3 and fields[0] == alias and fields[1] == "ssh-ed25519", lines
        asyncssh.import_public_key(" ".join(fields[1:]))
    return lines


async def test_a_vm_writing_extra_known_hosts_lines_pins_nothing_for_another_host(
    emulator: Emulator, attacker_host: asyncssh.SSHAcceptor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.add_instance("hostile", ZONE, metadata=GUEST_ATTRIBUTES)
    emulator.add_instance("other", ZONE, metadata=GUEST_ATTRIBUTES)
    await emulator.wait_for_status("hostile", "RUNNING")
    vm = emulator.instance("hostile")
    victim = f"compute.{emulator.instance('other').id}"
    own = emulator.fleet.host.host_keys(vm)[0][1]
    attacker = _blob(attacker_host.key)  # type: ignore[attr-defined]
    gce = gce_for(emulator)
    address, port = emulator.address("hostile") or "", emulator.ssh_port_of("hostile")
    attacker_port = attacker_host.sockets[0].getsockname()[1]

    for number, template in enumerate(HOSTILE):
        await _write_from_inside(
            emulator, address, port, f"compute.{vm.id}", template.format(own=own, attacker=attacker)
        )
        known_hosts = tmp_path / f"known_hosts_{number}"
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            keys = await asyncio.to_thread(gce.guest_host_keys, "hostile", ZONE)
        assert keys == [], (template, keys)
        assert not pin_host_keys(known_hosts, f"compute.{vm.id}", keys)
        assert _pinned_only_under(known_hosts, f"compute.{vm.id}") == []
        [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "hostile" in warning and "\n" not in warning and "\x1b" not in warning, warning
        assert not await _connects("127.0.0.1", attacker_port, known_hosts, victim)

    # One well-formed key that is not the VM's (it lies): pinned under its own name and no other.
    await _write_from_inside(emulator, address, port, f"compute.{vm.id}", f"ssh-ed25519 {attacker}\n")
    keys = await asyncio.to_thread(gce.guest_host_keys, "hostile", ZONE)
    assert keys == [f"ssh-ed25519 {attacker}"]
    known_hosts = tmp_path / "known_hosts_lie"
    assert pin_host_keys(known_hosts, f"compute.{vm.id}", keys)
    assert _pinned_only_under(known_hosts, f"compute.{vm.id}") == [f"compute.{vm.id} ssh-ed25519 {attacker}"]
    assert not await _connects("127.0.0.1", attacker_port, known_hosts, victim)
    assert await _connects("127.0.0.1", attacker_port, known_hosts, f"compute.{vm.id}")  # the control


async def test_a_tpu_worker_writing_extra_known_hosts_lines_pins_nothing(
    emulator: Emulator, attacker_host: asyncssh.SSHAcceptor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.add_tpu("tpu-h", accelerator_type="v4-16")
    emulator.add_tpu("tpu-v", accelerator_type="v4-8")
    # Both booted: tpu-v's workers publish their own keys only once up (CI once listed it still CREATING).
    await emulator.wait_for_tpu("tpu-h", "READY")
    await emulator.wait_for_tpu("tpu-v", "READY")
    node = emulator.tpu("tpu-h")
    worker = node.workers[1]
    own = emulator.fleet.host.host_keys(worker)[0][1]
    attacker = _blob(attacker_host.key)  # type: ignore[attr-defined]
    port = int(worker.labels.get(SSH_PORT_LABEL) or emulator.ssh_port)
    value = HOSTILE[0].format(own=own, attacker=attacker)
    await _write_from_inside(
        emulator, worker.external_ip or worker.network_ip, port, worker.host_alias(own), value
    )

    config = load_config(str(emulator.write_config(tmp_path / "gcptui.toml")))
    known_hosts = tmp_path / "own_known_hosts"
    config = config.model_copy(
        update={"ssh": config.ssh.model_copy(update={"known_hosts": str(known_hosts)})}
    )
    services = Services(config)
    try:
        backend = services.compute.backends["tpu"]
        assert isinstance(backend, TpuBackend)
        with caplog.at_level(logging.WARNING):
            rows = (await asyncio.to_thread(backend.list_rows)).rows
    finally:
        await services.close()
    [hostile] = [r for r in rows if r.name == "tpu-h"]
    assert hostile.host_key_alias is None  # its workers stay unknown: SSH refuses them
    assert [r.getMessage() for r in caplog.records if "tpu-h worker 1" in r.getMessage()]
    lines = known_hosts.read_text().splitlines()
    assert lines and all(line.startswith(f"tpu.{emulator.tpu('tpu-v').id}-") for line in lines), lines
    victim = f"tpu.{emulator.tpu('tpu-v').id}-0-{lines[0].split()[2][-6:]}"
    assert not await _connects("127.0.0.1", attacker_host.sockets[0].getsockname()[1], known_hosts, victim)


def test_the_rule_for_one_attribute(tmp_path: Path) -> None:
    key = _blob(asyncssh.generate_private_key("ssh-ed25519"))
    assert published_host_key("m", "ssh-ed25519", key) == f"ssh-ed25519 {key}"
    assert published_host_key("m", "ssh-ed25519", f"{key}\n") == f"ssh-ed25519 {key}"  # a .pub file's end
    assert published_host_key("m", "ssh-ed25519", f"ssh-ed25519 {key}") == f"ssh-ed25519 {key}"
    for bad in (
        f"ssh-rsa {key}",
        f"ssh-ed25519 {key} root@vm",
        f"ssh-ed25519  {key}",
        f"{key[:-4]}",
        "",
        "\x00",
    ):
        assert published_host_key("m", "ssh-ed25519", bad) is None, bad
    assert published_host_key("m", "*", key) is None
    assert not pin_host_keys(tmp_path / "k", "* compute.1", [f"ssh-ed25519 {key}"])
