"""What keep-alive asks of the GCE backend, on the emulator: the cheap listing, batched stop causes (one
zone-operations listing per cause, whatever the number of VMs), remembering a DELETE-action VM while it
runs (no client library needed) and bringing it back without the blocking wait, stock-outs as ``Stockout``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.compute.backend import BackendContext, Capability, Recovery, Stockout
from gcptui.remote.compute.gce.backend import GceBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.models import State, StopCause

ZONE = "us-central1-a"
OPERATIONS = "globalOperations.aggregatedList"  # the route of /aggregated/operations


def backend_for(emu: EmulatorThread, tmp_path: Path) -> GceBackend:
    config = load_config(str(emu.write_config(tmp_path / "gcptui.toml")))
    return GceBackend(BackendContext(config), FleetSource(config))


def test_many_stops_are_explained_by_one_listing_per_cause(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    names = ["spot-0", "spot-1", "spot-2"]
    for name in names:
        api_emulator.add_instance(name, spot=True)
    for name in names:
        api_emulator.wait_for_status(name, "RUNNING")
    backend = backend_for(api_emulator, tmp_path)
    api_emulator.preempt("spot-0")
    api_emulator.preempt("spot-1")
    for name in ("spot-0", "spot-1"):
        api_emulator.wait_for_status(name, "TERMINATED")
    rows = {r.name: r for r in backend.watch_rows().rows}
    # The watch's listing reads the status word alone: a preempted VM is plainly stopped there.
    assert rows["spot-0"].state is State.STOPPED and rows["spot-2"].state is State.RUNNING
    before = api_emulator.calls(OPERATIONS)
    found = backend.why_stopped_many(list(rows.values()), causes=(StopCause.PREEMPTED,))
    assert api_emulator.calls(OPERATIONS) == before + 1
    assert {name: stop.cause for name, stop in found.items()} == {
        "spot-0": StopCause.PREEMPTED,
        "spot-1": StopCause.PREEMPTED,
    }
    assert all(stop.at is not None for stop in found.values())
    assert backend.why_stopped_many([], causes=(StopCause.USER,)) == {}
    assert api_emulator.calls(OPERATIONS) == before + 1  # nothing to explain: nothing listed


def test_a_delete_action_vm_is_remembered_while_it_runs_and_made_anew(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    api_emulator.add_instance("spot-d", spot=True, termination_action="DELETE")
    api_emulator.wait_for_status("spot-d", "RUNNING")
    backend = backend_for(api_emulator, tmp_path)
    [row] = backend.watch_rows().rows
    assert not backend.can(row, Capability.DISK_OUTLIVES)
    disks = api_emulator.calls("disks.get")
    assert backend.remember(row) and api_emulator.calls("disks.get") > disks
    read = api_emulator.calls("disks.get")
    assert backend.remember(row) and api_emulator.calls("disks.get") == read  # once per VM id
    assert backend.fleet._gce is None  # remembering only read: the client library waits until acting

    api_emulator.preempt("spot-d")
    api_emulator.wait_for_status("spot-d", None)
    assert backend.get(row) is None
    gone = replace(row, state=State.DELETING)
    api_emulator.stock_out(1)
    with pytest.raises(Stockout):  # the seam's stock-out, whatever the provider's error class
        backend.begin_recovery(gone)
    assert backend.begin_recovery(gone) is Recovery.RECREATED
    fresh = backend.wait_running("spot-d", ZONE)
    assert fresh.instance_id != row.instance_id and fresh.state is State.RUNNING
