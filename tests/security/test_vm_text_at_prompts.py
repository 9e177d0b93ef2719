"""VM text in the CLI's interactive and error paths stays inert on a terminal (issue #30's last
paths): `vm delete`'s checkpoint prompt (the VM's progress names the run folder it offers to pull)
and the failed pull it then reports, on the emulator, the real CLI on a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_terminal_injection import CLI, EVIL
from tests.security.test_vm_text_on_terminal import assert_only_colours


def converse(
    args: list[str], cwd: Path, replies: list[tuple[bytes, bytes]], timeout: float = 90
) -> tuple[int, bytes]:
    """The CLI with stdin, stdout and stderr on one pseudo-terminal, typing each reply once its
    prompt has appeared: the exit code and every byte it wrote."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "300", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, *args], stdin=follower, stdout=follower, stderr=follower, env=env, cwd=cwd
    )  # fmt: skip
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        for prompt, reply in replies:
            while prompt not in seen:
                assert time.monotonic() < deadline, bytes(seen)
                try:
                    seen += os.read(leader, 65536)
                except OSError:  # the child closed the terminal before asking
                    raise AssertionError(bytes(seen)) from None
            os.write(leader, reply)
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    return code, bytes(seen)


def test_vm_delete_prompt_shows_the_vms_run_folder_inert(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """The job's progress names its checkpoint in a folder whose name carries OSC 0, OSC 52 and
    CSI 2J: the prompt offering to pull that folder, and the failed pull's line, show it inert."""
    emulator_thread.add_instance("vm-p", "us-central1-a")
    emulator_thread.wait_for_status("vm-p", "RUNNING")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    home: Path = emulator_thread.instance("vm-p").disk / "home"  # type: ignore[operator]
    (home / ".gcptui" / "job").mkdir(parents=True)
    record = {"event": "checkpoint", "step": 100, "path": f"runs/{EVIL}/checkpoints/step-000000100.pt"}
    (home / ".gcptui" / "job" / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    code, said = converse(
        ["--config", str(config), "vm", "delete", "vm-p"], work, [(b"first? [Y/n]", b"y\n")]
    )
    assert code == 1, said.decode(errors="replace")
    assert b"Pull runs/" in said and b"pull from vm-p failed" in said, said.decode(errors="replace")
    assert_only_colours(said)
    assert emulator_thread.instance("vm-p") is not None  # a failed pull deletes nothing
