"""VM text quoted in the CLI's one-line errors and warnings stays inert on a terminal (issue #30's
last paths), on the emulator with the real CLI on a pseudo-terminal: the group rendezvous check's
answer, `sweep run`'s "runs another job (…)" line, an SFTP pull's "shrank on the VM" and a bucket
pull's download error. Each hostile text carries OSC 0, OSC 52 and CSI 2J."""

from __future__ import annotations

import ctypes
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_job_group import free_port
from tests.cli.test_pull import config_for
from tests.cli.test_terminal_injection import CLI, EVIL
from tests.helpers.emulator import wait_until
from tests.helpers.gcs import FakeGcs
from tests.helpers.sshd import Sshd
from tests.security.test_vm_text_on_terminal import assert_only_colours, run_on_pty
from tests.sweep.test_sweep_emulator import setup_fleet


def test_the_group_checks_answer_from_a_vm_is_inert(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    """Node 0's `python3` (the VM's own: first on its PATH) answers the rendezvous listener's start
    with escape sequences instead of "listening": the one-line error quotes it inert."""
    for name in ("g0", "g1"):
        emulator_thread.add_instance(name, "us-central1-a")
    wait_until(lambda: all(emulator_thread.instance(n).status == "RUNNING" for n in ("g0", "g1")))
    hostile = emulator_thread.instance("g0").disk / "usr" / "local" / "bin" / "python3"  # type: ignore[operator]
    hostile.write_text(f"#!/bin/sh\ncat <<'END'\nerror={EVIL}\nEND\nexit 1\n")
    hostile.chmod(0o755)
    (tmp_path / "project").mkdir()
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text() + '\n[sync]\nsource = "project"\n[job]\ncommand = "sleep 600"\n'
        f'\n[[groups]]\nname = "pair"\nvms = ["g0", "g1"]\nport = {free_port()}\n'
    )
    code, said = run_on_pty(["--config", str(config), "job", "start", "pair", "--no-sync"], tmp_path)
    assert code != 0 and b"g0 cannot listen on" in said and b"click me" in said, said
    assert_only_colours(said)


SWEEP = """
name = "busy"
command = "echo {lr} > {run_dir}.txt"
metric = "val_loss"
goal = "min"
count = 1
vms = ["sw-0"]
poll_seconds = 0.2

[params.lr]
kind = "list"
values = [0.1]
"""


def test_sweep_runs_another_job_line_quotes_the_vms_command_inert(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """The VM already runs a job whose state file names a command with escape sequences: `sweep
    run` says its trials wait, quoting that command inert, then stops on Ctrl-C."""
    config, sweep, env = setup_fleet(
        emulator_thread, tmp_path, ["sw-0"], SWEEP, extra_config='command = "sleep 600"\n'
    )
    home: Path = emulator_thread.instance("sw-0").disk / "home"  # type: ignore[operator]
    (home / "project").mkdir()
    started = run_on_pty(["--config", str(config), "job", "start", "sw-0", "--no-sync"], tmp_path)
    assert started[0] == 0, started
    (home / ".gcptui" / "job" / "command").write_text(f"sleep 600 # {EVIL}\n")
    try:
        code, said = converse(
            ["--config", str(config), "sweep", "run", str(sweep)], tmp_path, b"its trials wait", env=env
        )
        assert b"sw-0 runs another job (sleep 600 # a" in said, said
        assert_only_colours(said)
    finally:
        run_on_pty(["--config", str(config), "job", "kill", "sw-0"], tmp_path)


def converse(args: list[str], cwd: Path, until: bytes, env: dict[str, str]) -> tuple[int, bytes]:
    """The CLI on a pseudo-terminal until it has written ``until``, then Ctrl-C (SIGINT): its exit
    code and every byte it wrote."""
    leader, follower = pty.openpty()
    env = {**env, "COLUMNS": "300", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
        env=env, cwd=cwd,
    )  # fmt: skip
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + 90
    try:
        while True:
            if until in seen and process.poll() is None:
                process.send_signal(signal.SIGINT)
                until = b"\0never"
            assert time.monotonic() < deadline, bytes(seen)
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        return process.wait(timeout=60), bytes(seen)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()


def test_a_bucket_pulls_download_error_names_the_object_inert(
    emulator_thread: EmulatorThread, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped VM's sweep trial is pulled from the bucket, whose object is named (in its sweep's
    folder) with escape sequences; the laptop's part file of it is not a prefix of the object, so
    the download fails its CRC32C check: the one-line error names the object inert."""
    emulator_thread.add_instance("vm-1", "us-central1-a", spot=True, status="TERMINATED")
    fake_gcs.make_bucket("team-runs")
    sweep = "s\x1b]0;pwned\x07\x1b]52;c;eA==\x07\x1b[2J"  # OSC 0, OSC 52, CSI 2J; no slash
    fake_gcs.client().bucket("team-runs").blob(f"x/vm-1/{sweep}/t001/w.pt").upload_from_string(b"w" * 4096)
    blob = fake_gcs.client().bucket("team-runs").get_blob(f"x/vm-1/{sweep}/t001/w.pt")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[storage]\nbucket = "gs://team-runs/x"\n')
    part = tmp_path / "laptop" / "t001" / ".w.pt.gcptui-part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"not the object's head")  # resumed (same version's time), then the whole checked
    stamp = (blob.updated - datetime.fromtimestamp(0, UTC)) // timedelta(microseconds=1) * 1000
    os.utime(part, ns=(stamp, stamp))
    for key, value in fake_gcs.env().items():
        monkeypatch.setenv(key, value)
    args = ["--config", str(config), "pull", "vm-1", f"runs/{sweep}/t001", str(tmp_path / "laptop")]
    code, said = run_on_pty(args, tmp_path)
    assert code != 0 and b"cannot download gs://team-runs/x/vm-1/s" in said and b"CRC32C" in said, said
    assert_only_colours(said)


HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;eA==\x07\x1b[2J"  # OSC 0, OSC 52 (clipboard), CSI 2J; no slash


def shrink_when_read(path: Path) -> Callable[[], None]:
    """Truncate ``path`` as soon as something reads it (inotify's IN_ACCESS: the VM's sftp-server
    sending its first block), as a VM rewriting a file during a pull does. Returns the stopper."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(path).encode(), 0x1) >= 0  # IN_ACCESS
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if select.select([fd], [], [], 0.1)[0]:
                os.read(fd, 4096)
                os.truncate(path, 0)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def stopper() -> None:
        stop.set()
        thread.join()
        os.close(fd)

    return stopper


def test_an_sftp_pulls_shrank_error_names_the_file_inert(sshd: Sshd, tmp_path: Path) -> None:
    """A file that shrinks on the VM while it is copied ends the pull with a one-line error naming
    it: inert whether the escape sequences are in the run folder's path or in the file's own name
    (a VM's name: refused before anything is read)."""
    config = config_for(sshd, tmp_path)
    run = tmp_path / "vm" / f"r{HOSTILE}" / "run"  # sshd runs here: the VM's files are this machine's
    run.mkdir(parents=True)
    for name in (f"w{HOSTILE}.pt", "w.pt"):
        with open(run / name, "wb") as file:
            file.truncate(64 << 20)  # past the pull's window of reads in flight
        stop = shrink_when_read(run / name)
        try:
            code, said = run_on_pty(
                ["--config", config, "pull", "box", str(run), str(tmp_path / "laptop")], tmp_path
            )
        finally:
            stop()
        assert_only_colours(said)
        if name == "w.pt":
            assert code == 1 and b"/run/w.pt shrank on the VM" in said, said
        else:  # never read: no shrinking, only the refusal, escaped
            assert code == 0 and b"1 refused for their names" in said, said
        (run / name).unlink()
