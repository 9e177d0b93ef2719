"""`gcptui vm delete` and the checkpoints on the disk that goes with the VM: said when the bucket
lacks them, offered as a pull first at a terminal, and pulled for real when accepted."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.models import Instance
from gcptui.remote.telemetry.progress import Checkpoint, Progress
from gcptui.tui.cli.delete_guard import READ_TIMEOUT, unsaved
from tests.cli.test_ls import gcptui

RUN = "runs/x"


def _vm_with_a_checkpoint(emu: EmulatorThread, tmp_path: Path) -> tuple[Path, Path]:
    emu.add_instance("vm-d", "us-central1-a")
    emu.wait_for_status("vm-d", "RUNNING")
    config = emu.write_config(tmp_path / "gcptui.toml")
    home = emu.instance("vm-d").disk / "home"  # type: ignore[operator]
    checkpoints = home / "project" / RUN / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-000000100.pt").write_bytes(b"weights" * 1000)
    (home / ".gcptui" / "job").mkdir(parents=True)
    record = {"event": "checkpoint", "step": 100, "path": f"{RUN}/checkpoints/step-000000100.pt", "time": 1.0}
    (home / ".gcptui" / "job" / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    return config, home


def test_the_bucket_having_the_newest_checkpoint_is_what_makes_a_disk_safe_to_delete() -> None:
    vm = Instance("a", "us-central1-a", "RUNNING")
    on_disk = Progress(last_checkpoint=Checkpoint(200, f"{RUN}/checkpoints/step-000000200.pt", 1.0))
    assert unsaved(on_disk, vm, bucket=False) is not None  # no bucket: the disk is the only copy
    assert unsaved(on_disk, vm, bucket=True).bucket_step is None  # type: ignore[union-attr]
    older = Progress(last_checkpoint=on_disk.last_checkpoint, mirrored=Checkpoint(100, "gs://b/a", 1.0))
    assert unsaved(older, vm, bucket=True).line().endswith("the bucket's newest is step 100")  # type: ignore[union-attr]
    same = Progress(last_checkpoint=on_disk.last_checkpoint, mirrored=Checkpoint(200, "gs://b/a", 1.0))
    assert unsaved(same, vm, bucket=True) is None and unsaved(Progress(), vm, bucket=False) is None


def test_unattended_delete_names_the_checkpoint_it_loses(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, _ = _vm_with_a_checkpoint(emulator_thread, tmp_path)
    result = gcptui("--config", str(config), "vm", "delete", "vm-d", "--yes")
    assert result.returncode == 0, result.stderr
    assert (
        f"vm-d holds checkpoint step 100 in {RUN} on its disk; no [storage] bucket is configured: "
        "deleting the VM deletes it"
    ) in result.stderr
    emulator_thread.wait_for_status("vm-d", None)  # deleted


def test_at_a_terminal_the_run_directory_is_pulled_before_the_delete(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, home = _vm_with_a_checkpoint(emulator_thread, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    leader, follower = pty.openpty()
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(config), "vm", "delete", "vm-d"],
        cwd=work, stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    seen = b""

    def answer(prompt: bytes, reply: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 60
        while prompt not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            try:
                seen += os.read(leader, 4096)
            except OSError:  # the child closed the terminal: it exited before asking
                raise AssertionError(seen.decode(errors="replace")) from None
        os.write(leader, reply)

    try:
        answer(b"first? [Y/n]", b"y\n")
        answer(b"Type 'yes'", b"yes\n")
        assert run.wait(timeout=120) == 0, seen.decode(errors="replace")
    finally:
        run.kill()
        os.close(leader)
    pulled = work / "pulled" / "vm-d" / "x" / "checkpoints" / "step-000000100.pt"
    assert pulled.read_bytes() == b"weights" * 1000
    emulator_thread.wait_for_status("vm-d", None)  # deleted


def test_delete_yes_of_a_running_vm_whose_ssh_is_down_says_why_at_once(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    # The API emulator's VMs run with addresses but no SSH server: a VM whose sshd is down.
    api_emulator.add_instance("dark")
    api_emulator.wait_for_status("dark", "RUNNING")
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    began = time.monotonic()
    result = gcptui("vm", "delete", "dark", "--yes", "--config", config)
    assert result.returncode == 0, result.stderr
    assert "dark: could not read its checkpoints before deleting (dark (" in result.stderr
    assert "connection refused" in result.stderr  # the reason, not an empty "()"
    # One connection attempt, not the progress follower's retries for READ_TIMEOUT (20 s).
    assert time.monotonic() - began < READ_TIMEOUT
    api_emulator.wait_for_status("dark", None)
