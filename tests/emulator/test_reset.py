"""``instances.reset`` is a hard reset that GCE does without leaving RUNNING: the VM keeps its
external address (nothing was stopped), its processes are gone, and its SSH server answers again."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path

import asyncssh

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import gce_for

ZONE = "us-central1-a"


async def _run(emu: EmulatorThread, name: str, command: str) -> str:
    async with asyncssh.connect(
        emu.address(name), port=emu.ssh_port_of(name), username=getpass.getuser(),
        client_keys=[str(emu.emulator.client_key)], known_hosts=None, agent_path=None, config=None,
        connect_timeout=10,
    ) as conn:  # fmt: skip
        return str((await conn.run(command, check=True)).stdout).strip()


def test_a_reset_vm_stays_running_at_its_address(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    emu = emulator_thread
    emu.add_instance("r", ZONE)
    emu.wait_for_status("r", "RUNNING")
    gce = gce_for(emu)
    before = gce.get("r", ZONE)
    assert before is not None and before.external_ip
    seen: list[str] = []
    fleet = emu.emulator.fleet  # type: ignore[union-attr]
    record = fleet._set_status

    async def recording(vm, status):  # type: ignore[no-untyped-def]
        seen.append(f"{vm.name}:{status}")
        await record(vm, status)

    emu.call(lambda: setattr(fleet, "_set_status", recording))
    assert asyncio.run(_run(emu, "r", "echo up")) == "up"
    gce.reset("r", ZONE)  # returns once the reset operation is DONE
    after = gce.get("r", ZONE)
    assert after is not None and after.status == "RUNNING"
    assert after.external_ip == before.external_ip and after.internal_ip == before.internal_ip
    assert seen == [], seen  # never PROVISIONING or STAGING: a reset is not a stop and a start
    assert asyncio.run(_run(emu, "r", "echo again")) == "again"
