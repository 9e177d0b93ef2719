"""Text a VM writes (GPU names from nvidia-smi, checkpoint paths from the progress protocol, file
names, job state) reaches no terminal as an escape sequence: the real `gcptui` CLI on a
pseudo-terminal (stdout and stderr), against the emulator, with OSC 0, OSC 52, OSC 8, CSI 2J and C1
controls planted on the VM's disk. Only SGR colours may pass."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_terminal_injection import CLI, EVIL

# SGR colours, and the cursor moves of gcptui's own progress bar (hide, show, clear the line, up):
# none of them is in the planted text, so any other ESC came from the VM.
OWN = re.compile(rb"\x1b\[[0-9;:]*m|\x1b\[\?25[lh]|\x1b\[2K|\x1b\[1A")
RUN = "runs/x"


def run_on_pty(args: list[str], cwd: Path, timeout: float = 90) -> tuple[int, bytes]:
    """The CLI with stdout and stderr both on a pseudo-terminal: its exit code and every byte."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "300", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=cwd
    )  # fmt: skip
    os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return code, bytes(output)


def assert_only_colours(output: bytes) -> None:
    """No ESC but SGR's, no C1 control (UTF-8 encoded), no BEL."""
    rest = OWN.sub(b"", output)
    assert b"\x1b" not in rest, f"an escape sequence reached the terminal: {output!r}"
    assert not re.search(rb"\xc2[\x80-\x9f]", rest), f"a C1 control reached the terminal: {output!r}"
    assert b"\x07" not in rest, output


def _hostile_vm(emu: EmulatorThread, tmp_path: Path) -> tuple[Path, Path]:
    """A GPU VM whose nvidia-smi names its GPU with escapes, whose job reports a checkpoint path with
    escapes, a 400-digit step and a line nested 100000 deep, and whose run folder holds a file named
    with escapes."""
    emu.add_instance("vm-e", "us-central1-a", gpus=[("nvidia-l4", 1)])
    emu.wait_for_status("vm-e", "RUNNING")
    config = emu.write_config(tmp_path / "gcptui.toml")
    disk: Path = emu.instance("vm-e").disk  # type: ignore[assignment]
    gpus = disk / "usr" / "local" / "bin" / "gpus.json"
    models = json.loads(gpus.read_text())
    models[0]["name"] = f"L4 {EVIL}"
    gpus.write_text(json.dumps(models))
    home = disk / "home"
    checkpoints = home / "project" / RUN / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-000000100.pt").write_bytes(b"weights")
    (home / "project" / RUN / f"notes{EVIL[:40]}.txt").write_text("odd\n")
    job = home / ".gcptui" / "job"
    job.mkdir(parents=True)
    lines = [
        json.dumps(
            {"event": "checkpoint", "step": 100, "path": f"{RUN}/checkpoints/{EVIL}/step-000000100.pt"}
        ),
        '{"step": ' + "9" * 400 + ', "loss": 1}',
        '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ]
    (job / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return config, home


def test_vm_text_reaches_the_terminal_inert(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    config, _ = _hostile_vm(emulator_thread, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    gpu_code, gpu = run_on_pty(["--config", str(config), "gpu", "vm-e", "--once"], work)
    assert gpu_code == 0 and b"L4" in gpu, gpu
    assert_only_colours(gpu)

    pull_code, pulled = run_on_pty(["--config", str(config), "pull", "vm-e", RUN, "got"], work)
    assert pull_code == 0, pulled
    assert b"1 refused for their names" in pulled  # said, escaped; never written
    assert_only_colours(pulled)
    assert sorted(p.name for p in (work / "got" / "x").iterdir()) == ["checkpoints"]

    # A missing path named with escapes: the top-level error line.
    missing_code, missing = run_on_pty(
        ["--config", str(config), "pull", "vm-e", "runs/\x1b]0;pwned\x07\x1b]52;c;eA==\x07\x1b[2J/x"], work
    )
    assert missing_code != 0 and b"does not exist" in missing, missing.decode(errors="replace")[-600:]
    assert_only_colours(missing)

    # Deleting reads the job's progress (the checkpoint it names, after a 400-digit step and a line
    # nested deeper than any parser recurses): one inert warning, and the VM goes.
    delete_code, deleted = run_on_pty(["--config", str(config), "vm", "delete", "vm-e", "--yes"], work)
    assert delete_code == 0, deleted
    assert b"holds checkpoint step 100" in deleted, deleted
    assert_only_colours(deleted)
