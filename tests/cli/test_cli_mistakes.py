"""User mistakes at the command line: one plain line and the right exit code, never a traceback,
and text from the config or the cloud printed as it is (never read as rich markup)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui


def test_vm_actions_on_an_unknown_name_are_usage_errors(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    for action in ("start", "stop", "delete", "preempt"):
        result = gcptui("vm", action, "nope", "--yes", "--config", config)
        assert result.returncode == 2, (action, result.stderr)
        assert result.stderr.count("\n") == 1 and "nope" in result.stderr


def test_a_bracketed_host_name_prints_as_it_is(tmp_path: Path) -> None:
    config = tmp_path / "gcptui.toml"
    config.write_text('[[hosts]]\nname = "lab[/gpu]"\naddress = "127.0.0.9"\n')
    result = gcptui("ls", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split("\t")[0] == "lab[/gpu]"


def test_a_cloud_error_keeps_its_brackets_and_a_bad_zone_flag_is_named(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    api_emulator.add_instance(
        "base-1", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)]
    )
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    result = gcptui("vm", "create", "x1", "--from", "base-1", "--zone", "nowhere-9", "--config", config)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "x1: zone nowhere-9 does not exist: check --zone" in result.stderr, result.stderr
    assert "fix [gcp] zones" not in result.stderr, result.stderr  # the config is not at fault


def test_ctrl_d_at_the_delete_question_deletes_nothing(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emulator_thread.add_instance("vm-d", "us-central1-a")
    emulator_thread.wait_for_status("vm-d", "RUNNING")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    leader, follower = pty.openpty()
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(config), "vm", "delete", "vm-d"],
        cwd=tmp_path, stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"Type 'yes'" not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            seen += os.read(leader, 4096)
        os.write(leader, b"\x04")  # Ctrl-D: end of input
        assert run.wait(timeout=60) == 1
        while True:  # the rest of what it wrote, up to the terminal's close
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        run.kill()
        os.close(leader)
    assert b"nothing deleted" in seen and b"Traceback" not in seen, seen.decode(errors="replace")
    assert emulator_thread.instance("vm-d") is not None


def test_ssh_accept_without_a_name_asks_for_one(tmp_path: Path) -> None:
    config = tmp_path / "gcptui.toml"
    config.write_text('[[hosts]]\nname = "box"\naddress = "127.0.0.9"\n')
    result = gcptui("ssh", "accept", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "ssh accept needs the NAME" in result.stderr


def test_negative_counts_are_usage_errors(tmp_path: Path) -> None:
    config = tmp_path / "gcptui.toml"
    config.write_text('[[hosts]]\nname = "box"\naddress = "127.0.0.9"\n')
    for command in (["logs", "box", "-n", "-5"], ["sweep", "report", "s", "--best", "-3"]):
        result = gcptui(*command, "--config", str(config))
        assert result.returncode == 2, (command, result.stderr)
        assert "is negative" in result.stderr


def test_a_refused_token_file_says_to_renew_that_file(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    stale = tmp_path / "stale-token"
    stale.write_text("not-the-emulators-token\n")
    text = config.read_text()
    assert "access_token_file" in text
    config.write_text(
        "\n".join(
            f'access_token_file = "{stale}"' if line.startswith("access_token_file") else line
            for line in text.splitlines()
        )
    )
    result = gcptui("ls", "--config", str(config))
    assert result.returncode == 1, result.stderr
    assert f"access_token_file {stale}" in result.stderr and "application-default" not in result.stderr


def test_a_vm_action_error_keeps_its_bracketed_words(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    from gcptui.remote.emulator.compute.faults import Fault

    api_emulator.add_instance("vm-b", "us-central1-a")
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    gone = f"The resource 'projects/{api_emulator.emulator.project}/zones/us-central1-a' was not found"
    api_emulator.emulator.fail_next(Fault("instances.stop", 404, gone, "notFound"))
    result = gcptui("vm", "stop", "vm-b", "--config", config)
    assert result.returncode == 1
    assert "fix [gcp] zones in gcptui.toml" in result.stderr, result.stderr


def test_a_vm_named_twice_is_acted_on_once(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    """`vm delete a a`: one delete (a second one would find the VM gone and fail the command)."""
    api_emulator.add_instance("vm-t", "us-central1-a", status="TERMINATED")
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    result = gcptui("vm", "delete", "vm-t", "vm-t", "--yes", "--config", config)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("✓ delete vm-t") == 1 and "✗" not in result.stderr, result.stderr
    assert api_emulator.calls("instances.delete") == 1
