"""Live sync never ships a private key that appears (or is written into a file) after it started:
`gcptui sync A B` and the TUI's `y` hold each one back, name it once, and keep syncing the rest.

The start-of-sync check of the whole tree is tests/cli/test_sync_cli.py's."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.sync.secrets import SecretGuard
from tests.sync.test_outage_cli import CLI, wait_until
from tests.sync.trees import write

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
# What appears under live sync, each a private key by another route; "notes.txt" is a file synced
# before that becomes one. The [ssh] key's copy has a harmless name and is found by its bytes.
KEYS = ("keys/id_test", "deploy.pem", "by_content.txt", "notes.txt", "backup/blob")


def add_keys(project: Path, own_key: Path) -> None:
    write(project, "keys/id_test", "named like ssh-keygen's keys\n")
    write(project, "deploy.pem", "named like a PEM file\n")
    write(project, "by_content.txt", "header line\n" + KEY)
    write(project, "notes.txt", KEY)  # a change: the VM keeps the notes it had
    (project / "backup").mkdir()
    shutil.copyfile(own_key, project / "backup" / "blob")


def assert_no_key_on(dest: Path) -> None:
    for rel in KEYS:
        if rel == "notes.txt":
            assert (dest / rel).read_text() == "plain notes\n", "a changed file became a key on the VM"
        else:
            assert not (dest / rel).exists(), f"{rel} reached the VM"


def test_the_guard_refuses_each_route_and_allows_the_listed(tmp_path: Path) -> None:
    own = tmp_path / "own_key"
    own.write_bytes(b"binary key bytes without a PEM header\x00\x01")
    guard = SecretGuard(allow=["certs/ok.pem"], own_key=own)
    data = own.read_bytes()
    assert guard.by_name("a/id_rsa") and guard.by_name("deploy.PEM") and guard.by_name("x.p12")
    assert guard.by_name("id_rsa.pub") is None and guard.by_name("certs/ok.pem") is None
    assert guard.by_content("copy", data, len(data)) == "is a copy of the [ssh] key"
    assert guard.by_content("k.txt", KEY.encode(), len(KEY)) == "holds a private key"
    assert guard.by_content("k.txt", b"x" * 10, 10) is None
    assert guard.by_content("big.txt", KEY.encode(), 1 << 20) is None  # over 64 KiB: not a key file


def test_cli_live_sync_to_two_vms_holds_back_keys_and_names_each_once(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    for name in ("vm-a", "vm-b"):
        emu.add_instance(name, "us-central1-a")
    for name in ("vm-a", "vm-b"):
        emu.wait_for_status(name, "RUNNING")
    project = tmp_path / "project"
    write(project, "train.py", "print('hi')\n")
    write(project, "notes.txt", "plain notes\n")
    config = emu.write_config(tmp_path / "emu" / "gcptui.toml", sync_source=project)
    dests = [emu.instance(n).disk / "home" / "project" for n in ("vm-a", "vm-b")]  # type: ignore[operator]
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, "--config", str(config), "sync", "vm-a", "vm-b"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        wait_until(lambda: all((d / "notes.txt").exists() for d in dests), 60, "the first sync")
        add_keys(project, Path(str(emu.emulator.client_key)))
        write(project, "train.py", "print('edited')\n")
        write(project, "later.py", "synced\n")
        wait_until(
            lambda: all((d / "later.py").exists() and "edited" in (d / "train.py").read_text() for d in dests),
            30, "the other edits",
        )  # fmt: skip
        wait_until(lambda: sum("not synced" in line for line in output) >= len(KEYS), 30, "the warnings")
        # Another change to a held-back key: still held back, not named again.
        write(project, "deploy.pem", "named like a PEM file, changed\n")
        write(project, "after.py", "synced after\n")
        wait_until(lambda: all((d / "after.py").exists() for d in dests), 30, "an edit after the keys")
        assert process.poll() is None, "".join(output)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        reader.join(timeout=5)
    text = "".join(output)
    for dest in dests:
        assert_no_key_on(dest)
    for rel in KEYS:
        said = [line for line in text.splitlines() if f"not synced: {rel} " in line]
        assert len(said) == 1, text  # once, though two VMs held it back
        assert "[sync].exclude" in said[0] and "[sync].allow_secrets" in said[0]
    assert "Traceback" not in text


async def test_tui_y_holds_back_keys_and_names_each_once(emulator: Emulator, tmp_path: Path) -> None:
    from gcptui.remote.config import load_config
    from gcptui.tui.app import GcptuiApp
    from tests.tui.test_fleet_jobs import until

    emulator.add_instance("vm-a", "us-central1-a")
    await emulator.wait_for_status("vm-a", "RUNNING")
    project = tmp_path / "project"
    write(project, "train.py", "print('hi')\n")
    write(project, "notes.txt", "plain notes\n")
    config = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    dest = emulator.instance("vm-a").disk / "home" / "project"  # type: ignore[operator]
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    told: list[str] = []
    async with app.run_test(size=(180, 30)) as pilot:
        app.monitors.sync_warning = lambda name, message: told.append(f"{name}: {message}")
        await until(pilot, lambda: app.live.get("vm-a") is not None and app.live["vm-a"].job is not None)
        await pilot.press("y")
        await until(pilot, lambda: app.live["vm-a"].sync_state == "in_sync")
        add_keys(project, Path(str(emulator.client_key)))
        write(project, "later.py", "synced\n")
        await until(pilot, lambda: (dest / "later.py").exists(), timeout=30)
        await until(pilot, lambda: len(told) >= len(KEYS), timeout=30)
        write(project, "id_test_2", "another, after\n")
        write(project, "after.py", "synced after\n")
        await until(pilot, lambda: (dest / "after.py").exists(), timeout=30)
        await until(pilot, lambda: any("id_test_2" in t for t in told), timeout=30)
    assert_no_key_on(dest)
    assert not (dest / "id_test_2").exists()
    for rel in (*KEYS, "id_test_2"):
        assert len([t for t in told if f"not synced: {rel} " in t]) == 1, told
