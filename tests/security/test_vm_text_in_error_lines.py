"""VM text quoted in the CLI's one-line errors and warnings stays inert on a terminal (issue #30's
last paths), on the emulator with the real CLI on a pseudo-terminal: the group rendezvous check's
answer, `sweep run`'s "runs another job (…)" line, an SFTP pull's "shrank on the VM" and a bucket
pull's download error. Each hostile text carries OSC 0, OSC 52 and CSI 2J."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_job_group import free_port
from tests.cli.test_terminal_injection import EVIL
from tests.helpers.emulator import wait_until
from tests.security.test_vm_text_on_terminal import assert_only_colours, run_on_pty


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
