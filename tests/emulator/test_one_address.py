"""Where only 127.0.0.1 exists (macOS), every emulated VM gets its own port, named by a label."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.models import SSH_PORT_LABEL, Instance
from gcptui.remote.ssh.target import target_for_instance
from tests.helpers.emulator import FAST


def as_instance(emulator: Emulator, name: str) -> Instance:
    vm = emulator.instance(name)
    return Instance(name=vm.name, zone=vm.zone, status=vm.status, external_ip=vm.nat_ip,
                    instance_id=str(vm.id), labels=dict(vm.labels), source="gce")  # fmt: skip


async def test_vms_share_127_0_0_1_on_their_own_ports_and_gcptui_follows_the_label(tmp_path: Path) -> None:
    import asyncssh

    async with Emulator(tmp_path / "emu", one_address=True, **FAST) as emulator:
        for name in ("a", "b"):
            emulator.add_instance(name, "us-central1-a")
        for name in ("a", "b"):
            await emulator.wait_for_status(name, "RUNNING")
        config = load_config(emulator.write_config())
        targets = [
            target_for_instance(as_instance(emulator, n), config.ssh, base_dir=config.base_dir)
            for n in ("a", "b")
        ]

        assert {t.address for t in targets} == {"127.0.0.1"}
        assert targets[0].port != targets[1].port
        assert targets[0].port == int(emulator.instance("a").labels[SSH_PORT_LABEL])
        for target in targets:
            async with asyncssh.connect(
                target.address, port=target.port, username=target.user, client_keys=[str(target.key)],
                known_hosts=str(target.known_hosts), host_key_alias=target.host_key_alias, config=None,
            ) as conn:  # fmt: skip
                result = await conn.run("basename $(dirname $HOME)", check=True)
                assert str(result.stdout).strip() == target.name  # each port reaches its own VM
