"""The TUI's shell key in a real terminal: ``S`` suspends the fleet table, OpenSSH opens a shell on the
selected VM with gcptui's key and pinned host key, and ``exit`` brings the table back as it was."""

from __future__ import annotations

import re

import pytest

from tests.e2e.terminal import ROOT, DemoRun, demo_env, descendants, fleet_listed, gcptui_command, row

VM = "trainer-l4-1"


@pytest.mark.timeout(150)
def test_shell_key_opens_a_shell_and_exit_returns_to_the_fleet(demo_run: DemoRun) -> None:
    term = demo_run.terminal
    argv, _which = gcptui_command()
    pane = term.start([*argv, "demo"], cwd=ROOT, env=demo_env(demo_run.tmpdir))
    term.wait_for(fleet_listed, "every demo VM listed", timeout=45)
    demo_run.seen.update(descendants(pane))
    # The Job cell reads the job's state (the demo's job runs here from the start) once SSH works.
    term.wait_for(
        lambda s: re.search(r"\b(none|running)\b", row(s, VM)), f"{VM} reachable over SSH", timeout=45
    )
    term.press("/")
    term.wait_for(lambda s: "filter: words" in s, "the filter box", timeout=15)
    term.type("l4")
    term.press("Enter")
    term.wait_for(
        lambda s: row(s, VM) and not row(s, "trainer-a100-1"), "the table filtered to the VM", timeout=15
    )
    before = term.screen()

    term.press("S")
    term.wait_for(lambda s: f"shell on {VM}" in s, "the suspended app and the ssh session", timeout=20)
    term.type("echo shell-answer-$((6*7)) on $GCPTUI_EMULATED_VM")
    term.press("Enter")
    term.wait_for(lambda s: "shell-answer-42 on" in s, "the remote shell's answer", timeout=20)
    term.type("exit")
    term.press("Enter")
    term.wait_for(
        lambda s: row(s, VM) and "filter: l4" in s, "the fleet table back, still filtered", timeout=20
    )
    assert row(term.screen(), VM).split()[:3] == row(before, VM).split()[:3]
    term.press("q")
    assert term.wait_exit(timeout=45) == 0
