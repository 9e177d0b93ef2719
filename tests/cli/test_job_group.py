"""``gcptui job ... GROUP`` through the real CLI on the emulator: every node acts, JSON names the group."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui
from tests.helpers.emulator import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def test_job_start_status_and_kill_of_a_group_act_on_every_node(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    for name in ("g0", "g1"):
        emulator_thread.add_instance(name, "us-central1-a")
    wait_until(lambda: all(emulator_thread.instance(n).status == "RUNNING" for n in ("g0", "g1")))
    (tmp_path / "project").mkdir()
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text()
        + f'\n[sync]\nsource = "project"\n[job]\ncommand = "sleep 600"\nstop_grace_seconds = 2\n'
        f'\n[[groups]]\nname = "pair"\nvms = ["g0", "g1"]\nport = {free_port()}\n'
    )
    started = gcptui("--config", str(config), "job", "start", "pair", "--json", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    nodes = json.loads(started.stdout)
    assert [(n["name"], n["group"], n["state"], n["group_state"]) for n in nodes] == [
        ("g0", "pair", "running", "running"),
        ("g1", "pair", "running", "running"),
    ]
    assert "--node-rank 1" in nodes[1]["command"] and "--no-python sleep 600" in nodes[1]["command"]

    again = gcptui("--config", str(config), "job", "start", "pair", cwd=tmp_path)
    assert again.returncode == 1 and "group pair already runs on g0, g1" in again.stderr

    status = gcptui("--config", str(config), "job", "status", "pair", "--json", cwd=tmp_path)
    assert [n["group"] for n in json.loads(status.stdout)] == ["pair", "pair"]
    # A group's nodes carry `group` however they are named: every machine, or one VM by its name.
    every = gcptui("--config", str(config), "job", "status", "--json", cwd=tmp_path)
    assert sorted((n["name"], n.get("group")) for n in json.loads(every.stdout)) == [
        ("g0", "pair"),
        ("g1", "pair"),
    ]
    one = gcptui("--config", str(config), "job", "status", "g1", "--json", cwd=tmp_path)
    assert [(n["name"], n.get("group")) for n in json.loads(one.stdout)] == [("g1", "pair")], one.stderr

    killed = gcptui("--config", str(config), "job", "kill", "pair", "--json", cwd=tmp_path)
    assert killed.returncode == 0, killed.stderr
    assert {(n["state"], n["group_state"]) for n in json.loads(killed.stdout)} == {("killed", "killed")}


def test_a_group_named_like_a_vm_is_one_usage_line(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    emulator_thread.add_instance("g0", "us-central1-a")
    wait_until(lambda: emulator_thread.instance("g0").status == "RUNNING")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text() + '\n[job]\ncommand = "true"\n[[groups]]\nname = "g0"\nvms = ["g0"]\n'
    )
    for command in (["job", "status", "g0"], ["logs", "g0", "-n", "1"]):
        result = gcptui("--config", str(config), *command, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert "names both a [[groups]] entry and a VM" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_kill_of_a_group_with_a_node_down_kills_the_nodes_still_up(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    for name in ("g0", "g1"):
        emulator_thread.add_instance(name, "us-central1-a", spot=True)
    wait_until(lambda: all(emulator_thread.instance(n).status == "RUNNING" for n in ("g0", "g1")))
    (tmp_path / "project").mkdir()
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text()
        + f'\n[sync]\nsource = "project"\n[job]\ncommand = "sleep 600"\nstop_grace_seconds = 2\n'
        f'\n[[groups]]\nname = "pair"\nvms = ["g0", "g1"]\nport = {free_port()}\n'
    )
    started = gcptui("--config", str(config), "job", "start", "pair", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    emulator_thread.preempt("g1")
    emulator_thread.wait_for_status("g1", "TERMINATED")

    # g0's half of the group would wait in its rendezvous for g1, on paid GPUs: kill reaches it, and
    # the node that is down is one line (its job went with it).
    status = gcptui("--config", str(config), "job", "status", "pair", "--json", cwd=tmp_path)
    assert [(n["name"], n["state"]) for n in json.loads(status.stdout)] == [("g0", "running")], status.stderr
    assert status.returncode == 1 and "g1 is TERMINATED" in status.stderr
    killed = gcptui("--config", str(config), "job", "kill", "pair", "--json", cwd=tmp_path)
    assert killed.returncode == 1 and "g1 is TERMINATED" in killed.stderr, killed.stderr
    assert "Traceback" not in killed.stderr and len(killed.stderr.strip().splitlines()) == 1, killed.stderr
    assert [(n["name"], n["state"]) for n in json.loads(killed.stdout)] == [("g0", "killed")]
    after = gcptui("--config", str(config), "job", "status", "g0", "--json", cwd=tmp_path)
    assert json.loads(after.stdout)[0]["state"] == "killed", after.stderr


def test_logs_of_a_group_with_a_node_down_print_the_nodes_still_up(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    for name in ("g0", "g1"):
        emulator_thread.add_instance(name, "us-central1-a", spot=True)
    wait_until(lambda: all(emulator_thread.instance(n).status == "RUNNING" for n in ("g0", "g1")))
    (tmp_path / "project").mkdir()
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text()
        + '\n[sync]\nsource = "project"\n[job]\ncommand = "sh -c \'echo node $GCPTUI_NODE_RANK up; sleep 600\'"\n'
        f'stop_grace_seconds = 2\n\n[[groups]]\nname = "pair"\nvms = ["g0", "g1"]\nport = {free_port()}\n'
    )
    started = gcptui("--config", str(config), "job", "start", "pair", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    wait_until(
        lambda: "node 0 up" in gcptui("--config", str(config), "logs", "g0", "-n", "5", cwd=tmp_path).stdout
    )
    emulator_thread.preempt("g1")
    emulator_thread.wait_for_status("g1", "TERMINATED")

    # What node 0 said after node 1 went away is what the user looks for: its log prints, and the
    # node that is down is one line (exit 1, as for a source that failed).
    logs = gcptui("--config", str(config), "logs", "pair", "-n", "5", cwd=tmp_path)
    assert "node 0 up" in logs.stdout, logs.stderr
    assert logs.returncode == 1 and "g1 is TERMINATED" in logs.stderr, logs.stderr
    assert "Traceback" not in logs.stderr and len(logs.stderr.strip().splitlines()) == 1, logs.stderr
