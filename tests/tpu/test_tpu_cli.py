"""``gcptui ls`` shows TPU nodes beside the VMs, through the compute seam: source, the node's own
state word beside the neutral one, each worker with its address."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.cli.main import main


def test_ls_json_lists_a_tpu_node_with_its_workers(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator_thread.add_instance("vm-a")
    emulator_thread.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    emulator_thread.wait_for_tpu("tpu-a", "READY")
    emulator_thread.wait_for_status("vm-a", "RUNNING")
    config = str(emulator_thread.write_config(tmp_path / "gcptui.toml"))
    assert main(["ls", "--json", "--config", config]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    node = emulator_thread.tpu("tpu-a")
    tpu = rows["tpu-a"]
    assert (tpu["source"], tpu["status"], tpu["state"], tpu["spot"], tpu["machine_type"]) == (
        "tpu", "READY", "running", True, "v4-16"
    )  # fmt: skip
    assert tpu["workers"] == [
        {"name": f"w{i}", "address": w.external_ip, "state": "running"} for i, w in enumerate(node.workers)
    ]
    assert tpu["usd_per_hour"] > 0 and tpu["price_source"] == "fallback"
    assert rows["vm-a"]["source"] == "gce" and rows["vm-a"]["workers"] == []

    emulator_thread.preempt_tpu("tpu-a")
    emulator_thread.wait_for_tpu("tpu-a", "PREEMPTED")
    assert main(["ls", "--json", "--config", config]) == 0
    (tpu,) = [row for row in json.loads(capsys.readouterr().out) if row["name"] == "tpu-a"]
    assert (tpu["status"], tpu["state"], tpu["preempted"]) == ("PREEMPTED", "preempted", True)
    assert all(w["address"] is None for w in tpu["workers"])
