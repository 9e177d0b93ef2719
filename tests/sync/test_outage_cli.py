"""`gcptui sync NAME` (follow mode) rides out sshd going away: changes queue and arrive, nothing exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers.sshd import Sshd
from tests.sync.trees import snapshot, write

CLI = "import sys; from gcptui.tui.cli.main import main; sys.exit(main(sys.argv[1:]))"


def wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def static_host_config(path: Path, sshd: Sshd, source: Path, dest: Path) -> Path:
    path.write_text(
        f'[[hosts]]\nname = "box"\naddress = "{sshd.host}"\nport = {sshd.port}\nuser = "{sshd.user}"\n'
        f'key = "{sshd.client_key}"\nknown_hosts = "{sshd.known_hosts}"\n'
        f'\n[sync]\nsource = "{source}"\ndest = "{dest}"\n'
    )
    return path


def test_follow_mode_survives_sshd_stopped_for_three_seconds(sshd: Sshd, tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "a.py", "a")
    config = static_host_config(tmp_path / "gcptui.toml", sshd, local, remote)
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, "--config", str(config), "sync", "box"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(lambda: snapshot(remote) == snapshot(local), 30, "the first sync")
        sshd.stop()
        write(local, "while_down.py", "queued")
        write(local, "a.py", "changed while down")
        write(local, "pkg/new.py", "new directory while down")
        wait_until(lambda: "reconnecting" in "".join(output), 15, "the outage to show")
        time.sleep(3)  # the outage itself: sshd stays away this long (the scenario, not a wait)
        write(local, "late.py", "written just before sshd returns")
        sshd.start()  # same directory: same host key
        wait_until(lambda: snapshot(remote) == snapshot(local), 40, "the queued changes")
        write(local, "after.py", "following again")
        wait_until(lambda: snapshot(remote) == snapshot(local), 20, "a change after the outage")
        assert process.poll() is None, "".join(output)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
    assert "Traceback" not in "".join(output)
    assert os.path.isdir(remote)
