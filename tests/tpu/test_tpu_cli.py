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

    # `gpu` with no name: every machine, as `job status` (a TPU node: each worker's chips, tpuN,
    # no temperature or power columns tpu-info never fills).
    assert main(["gpu", "--once", "--config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    for worker in ("tpu-a/w0", "tpu-a/w1"):
        chips = [line for line in lines if line.startswith(f"{worker}  tpu")]
        assert len(chips) == 4 and not any(line.endswith("?W") for line in chips), lines
    assert any(line.startswith("vm-a  ") for line in lines), lines

    emulator_thread.preempt_tpu("tpu-a")
    emulator_thread.wait_for_tpu("tpu-a", "PREEMPTED")
    assert main(["ls", "--json", "--config", config]) == 0
    (tpu,) = [row for row in json.loads(capsys.readouterr().out) if row["name"] == "tpu-a"]
    assert (tpu["status"], tpu["state"], tpu["preempted"]) == ("PREEMPTED", "preempted", True)
    assert all(w["address"] is None for w in tpu["workers"])


def test_one_key_runs_the_job_on_both_workers_and_logs_show_both(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator_thread.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    emulator_thread.wait_for_tpu("tpu-a", "READY")
    node = emulator_thread.tpu("tpu-a")
    for worker in node.workers:
        (Path(worker.disk or "") / "home" / "project").mkdir(parents=True)
    config_path = emulator_thread.write_config(tmp_path / "gcptui.toml")
    command = 'echo "worker $TPU_WORKER_ID of $GCPTUI_WORKERS up"; sleep 60'
    config_path.write_text(config_path.read_text() + f"\n[job]\ncommand = {json.dumps(command)}\n")
    config = str(config_path)

    assert main(["job", "start", "tpu-a", "--no-sync", "--config", config]) == 0
    capsys.readouterr()
    assert main(["job", "status", "tpu-a", "--json", "--config", config]) == 0
    statuses = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["state"]) for s in statuses] == [("tpu-a/w0", "running"), ("tpu-a/w1", "running")]

    # Started again: refused, and the way on names the node (its job runs on every worker at once).
    assert main(["job", "start", "tpu-a", "--no-sync", "--config", config]) == 1
    said = capsys.readouterr().err
    assert "already running on tpu-a/w0" in said and "`gcptui job restart tpu-a`" in said, said

    # Starting one worker of a slice alone is refused (it would wait for the others for ever).
    assert main(["job", "restart", "tpu-a/w1", "--no-sync", "--config", config]) == 2
    assert "runs on every worker of tpu-a at once" in capsys.readouterr().err

    for _ in range(100):  # both workers' first line, merged with a worker prefix
        assert main(["logs", "tpu-a", "-n", "5", "--config", config]) == 0
        out = capsys.readouterr().out
        if "worker 0 of 2 up" in out and "worker 1 of 2 up" in out:
            break
    assert any(line.startswith("tpu-a/w0") and "worker 0 of 2 up" in line for line in out.splitlines())
    assert any(line.startswith("tpu-a/w1") and "worker 1 of 2 up" in line for line in out.splitlines())

    assert main(["job", "kill", "tpu-a", "--config", config]) == 0
    capsys.readouterr()
    assert main(["job", "status", "tpu-a", "--json", "--config", config]) == 0
    assert [s["state"] for s in json.loads(capsys.readouterr().out)] == ["killed", "killed"]


def test_vm_commands_act_on_a_tpu_node_through_its_backend(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator_thread.add_tpu("tpu-d", accelerator_type="v4-8")  # on-demand: it can stop and start
    emulator_thread.add_tpu("tpu-s", accelerator_type="v4-8", spot=True)
    emulator_thread.wait_for_tpu("tpu-d", "READY")
    emulator_thread.wait_for_tpu("tpu-s", "READY")
    config = str(emulator_thread.write_config(tmp_path / "gcptui.toml"))
    assert main(["vm", "stop", "tpu-d", "--config", config]) == 0
    assert emulator_thread.tpu("tpu-d").state == "STOPPED"
    assert main(["vm", "start", "tpu-d", "--config", config]) == 0
    assert emulator_thread.tpu("tpu-d").state == "READY"
    capsys.readouterr()
    # A Spot node cannot be stopped (only deleted): one line, nothing changed.
    assert main(["vm", "stop", "tpu-s", "--config", config]) == 2
    assert "tpu-s is a tpu row: `vm stop` cannot act on it" in capsys.readouterr().err
    # The Cloud TPU API has no call that acts out a preemption: said per row, through the seam, where
    # the config names no control path (as on GCP) ...
    on_gcp = tmp_path / "gcp.toml"
    on_gcp.write_text("".join(line for line in Path(config).read_text().splitlines(keepends=True)
                              if not line.startswith("control_endpoint")))  # fmt: skip
    assert main(["vm", "preempt", "tpu-s", "--config", str(on_gcp)]) == 2
    assert "tpu-s is a tpu row: `vm preempt` cannot act on it" in capsys.readouterr().err
    assert emulator_thread.tpu("tpu-s").state == "READY"
    # ... and the emulator's control path preempts it (`gcptui emulator`'s config names it).
    assert main(["vm", "preempt", "tpu-s", "--config", config]) == 0
    emulator_thread.wait_for_tpu("tpu-s", "PREEMPTED")
    assert main(["vm", "delete", "tpu-s", "--yes", "--config", config]) == 0
    emulator_thread.wait_for_tpu("tpu-s", None)
