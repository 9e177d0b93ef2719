"""Against the strict emulator (inserts validated as GCE validates them): a DELETE-action Spot VM is
preempted and deleted, recreated with an insert that names its boot image and a zonal disk type, its
job relaunched, and the new VM's host key pinned from its ``hostkeys/`` guest attributes: no manual step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.ssh.errors import HostKeyChangedError
from gcptui.remote.ssh.host_keys import matching_lines
from tests.helpers.emulator import eventually

JOB = 'printf \'{"step": 1, "total_steps": 10}\\n\' >> "$GCPTUI_METRICS"; sleep 60'
GUEST_ATTRIBUTES = {"enable-guest-attributes": "TRUE"}


def _host_key_line(emu, name: str) -> str:  # type: ignore[no-untyped-def]
    vm = emu.instance(name)
    [(algorithm, key)] = emu.fleet.host.host_keys(vm)
    return f"compute.{vm.id} {algorithm} {key}"


async def test_delete_action_vm_recreated_relaunched_and_pinned_without_a_manual_step(
    fleet_factory, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "own_known_hosts"  # empty: only guest attributes can pin the VMs
    fleet = await fleet_factory(
        ["spot-p"],
        command=JOB,
        termination_action="DELETE",
        metadata=GUEST_ATTRIBUTES,
        known_hosts=known_hosts,
    )
    services, emu = fleet.services, fleet.emu
    await fleet.start_job("spot-p")
    old = emu.instance("spot-p")
    assert known_hosts.read_text().splitlines() == [_host_key_line(emu, "spot-p")]
    assert oct(known_hosts.stat().st_mode & 0o777) == "0o600"

    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1 and keepalive.remembered("spot-p"))
        inserts_before = emu.calls("instances.insert")
        emu.preempt("spot-p")
        await emu.wait_for_status("spot-p", None)
        await eventually(lambda: "spot-p" in keepalive.timelines and keepalive.timelines["spot-p"].outcome != "recovering",
                         timeout=60)  # fmt: skip
    finally:
        runner.cancel()
        await keepalive.close()
    timeline = keepalive.timelines["spot-p"]
    assert timeline.outcome == "resumed", [e.line() for e in events]
    assert emu.calls("instances.insert") == inserts_before + 1  # accepted at the first try: no 400 loop
    assert any(e.kind == "restarting" and "FRESH boot disk" in e.detail for e in timeline.events)
    new = emu.instance("spot-p")
    assert new.id != old.id
    [boot] = [emu.fleet.disks[(new.zone, d.disk)] for d in new.disks if d.boot]
    assert boot.source_image and boot.source_image.endswith("debian-12-bookworm-v20250101")
    assert boot.type == "pd-balanced" and boot.size_gb == 10  # the original type and size kept
    assert _host_key_line(emu, "spot-p") in known_hosts.read_text().splitlines()
    [fresh] = await services.resolve(["spot-p"])
    assert (await services.jobs.status(services.reach(fresh))).state == "running"


async def test_a_key_differing_from_the_known_one_is_refused_even_with_guest_attributes(
    fleet_factory, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "own_known_hosts"
    fleet = await fleet_factory(["spot-q"], command=JOB, metadata=GUEST_ATTRIBUTES, known_hosts=known_hosts)
    services, emu = fleet.services, fleet.emu
    vm = emu.instance("spot-q")
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    known_hosts.write_text(f"compute.{vm.id} {other}\n")
    [instance] = await services.resolve(["spot-q"])
    with pytest.raises(HostKeyChangedError):
        await services.pool.connection(services.target(instance))
    assert matching_lines(known_hosts, f"compute.{vm.id}") == [1]  # nothing added, nothing replaced
    assert known_hosts.read_text() == f"compute.{vm.id} {other}\n"
