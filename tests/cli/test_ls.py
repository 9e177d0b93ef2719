"""``gcptui ls`` as a user runs it: the real binary's entry, against the emulator over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.sshd import free_port

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_FIELDS = {
    "name",
    "zone",
    "status",
    "machine_type",
    "gpus",
    "spot",
    "external_ip",
    "internal_ip",
    "source",
}


def gcptui(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gcptui.tui", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_ls_json_prints_design_fields(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    api_emulator.add_instance(
        "spot-l4", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)], spot=True
    )
    api_emulator.add_instance("cpu-box", "europe-west4-b", machine_type="n2-standard-4", external_ip=False)
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[[hosts]]\nname = "box"\naddress = "127.0.0.9"\n')

    result = gcptui("ls", "--json", "--config", str(config))

    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"spot-l4", "cpu-box", "box"}
    for row in rows.values():
        assert REFERENCE_FIELDS <= set(row)
    assert rows["spot-l4"]["gpus"] == [{"type": "nvidia-l4", "count": 1}]
    assert rows["spot-l4"]["spot"] is True and rows["spot-l4"]["source"] == "gce"
    assert rows["cpu-box"]["external_ip"] is None and rows["cpu-box"]["gpus"] == []
    assert rows["box"]["source"] == "host" and rows["box"]["external_ip"] == "127.0.0.9"


def test_ls_against_refused_endpoint_is_one_line_exit_1(tmp_path: Path) -> None:
    config = tmp_path / "gcptui.toml"
    config.write_text(f'[gcp]\nproject = "p"\napi_endpoint = "http://127.0.0.1:{free_port()}"\n')

    result = gcptui("ls", "--json", "--config", str(config))

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "127.0.0.1" in lines[0]


def test_unknown_config_key_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "gcptui.toml"
    config.write_text('[gcp]\nproject = "p"\nzone = "us-central1-a"\n')

    result = gcptui("ls", "--config", str(config))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert f"{config}:3" in result.stderr and "gcp.zone" in result.stderr


def test_vm_preempt_then_ls_reads_terminated_preempted(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    api_emulator.add_instance("spot-1", "us-central1-a", spot=True)
    api_emulator.add_instance("plain-1", "us-central1-a")
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))

    assert gcptui("vm", "preempt", "spot-1", "--config", config).returncode == 0
    assert gcptui("vm", "stop", "plain-1", "--config", config).returncode == 0
    api_emulator.wait_for_status("spot-1", "TERMINATED")
    rows = {r["name"]: r for r in json.loads(gcptui("ls", "--json", "--config", config).stdout)}

    assert rows["spot-1"]["status"] == "TERMINATED" and rows["spot-1"]["preempted"] is True
    assert rows["plain-1"]["status"] == "TERMINATED" and rows["plain-1"]["preempted"] is False


def test_piped_ls_prints_every_name_whole_one_row_per_line(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    long_names = [f"trainer-with-a-rather-long-name-{n:02d}-for-column-truncation" for n in range(3)]
    for name in long_names:
        api_emulator.add_instance(
            name, "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)]
        )
    config = api_emulator.write_config(tmp_path / "gcptui.toml")

    result = gcptui("ls", "--config", str(config))  # stdout is a pipe here, as in `gcptui ls | cat`

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[0] == "Name"
    rows = [line.split("\t") for line in lines[1:]]
    assert sorted(row[0] for row in rows) == sorted(long_names)
    assert all(len(row) == len(lines[0].split("\t")) for row in rows)
    assert "…" not in result.stdout


def documented_keys(heading: str) -> set[str]:
    """The keys of a JSON object as docs/REFERENCE.md's table under ``heading`` lists them."""
    text = (ROOT / "docs" / "REFERENCE.md").read_text()
    section = text.split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]
    return {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}


def test_the_reference_lists_exactly_the_json_keys_printed() -> None:
    from gcptui.remote.models import Instance
    from gcptui.remote.telemetry.gpu import GpuSnapshot
    from gcptui.tui.cli.logs import snapshot_json

    assert documented_keys("`ls --json`") == set(Instance("a", "z", "RUNNING").to_json())
    assert documented_keys("`gpu --json`") == set(snapshot_json("a", GpuSnapshot(state="ok")))


def test_vm_preempt_of_an_on_demand_vm_says_it_was_not_preempted(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    """GCE live-migrates an on-demand VM on a maintenance event: a plain '✓ preempt' would claim a preemption."""
    api_emulator.add_instance("plain-2", "us-central1-a")
    api_emulator.wait_for_status("plain-2", "RUNNING")
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    result = gcptui("vm", "preempt", "plain-2", "--config", config)
    assert result.returncode == 0, result.stderr
    assert "plain-2 is on-demand: not preempted" in result.stderr, result.stderr
    assert api_emulator.instance("plain-2").status == "RUNNING"
