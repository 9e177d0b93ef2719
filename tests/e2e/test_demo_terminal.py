"""``gcptui demo`` as a person uses it, in a real terminal: tmux, keys sent, the screen read back."""

from __future__ import annotations

import re

import pytest

from tests.e2e.terminal import (
    ROOT,
    STEP_LINE,
    DemoRun,
    demo_env,
    descendants,
    fleet_listed,
    gcptui_command,
    row,
    wait_no_leftovers,
)

VM = "trainer-a100-1"


def _steps(screen: str) -> list[int]:
    return [int(m) for m in re.findall(r"step (\d+)/\d+ loss", screen)]


@pytest.mark.timeout(180)
def test_demo_lists_fleet_streams_a_started_jobs_log_and_leaves_nothing_running(demo_run: DemoRun) -> None:
    term, marker = demo_run.terminal, str(demo_run.tmpdir)
    argv, _which = gcptui_command()
    pane = term.start([*argv, "demo"], cwd=ROOT, env=demo_env(demo_run.tmpdir))

    def record() -> None:
        demo_run.seen.update(descendants(pane))

    term.wait_for(fleet_listed, "every demo VM listed with its status", timeout=45)
    record()
    (demo_dir,) = demo_run.tmpdir.glob("gcptui-demo-*")

    # The job column reads "none" once the app has asked the VM over SSH: the VM is reachable.
    term.wait_for(lambda s: re.search(r"\bnone\b", row(s, VM)), f"{VM}'s job state read over SSH", timeout=45)
    # The demo trains on one VM from the start, no key pressed (tui/cli/demo.py: TRAINING_VM).
    term.wait_for(lambda s: re.search(r"\brunning\b", row(s, "trainer-l4-1")), "the demo's own job running",
                  timeout=45)  # fmt: skip
    record()

    # Pick the machine the way a person would: filter the table down to it.
    term.press("/")
    # Keys sent before the box takes focus still go to the table, so wait for it like a person looks.
    term.wait_for(lambda s: "filter: words" in s, "the filter box", timeout=15)
    term.type("a100")
    term.press("Enter")
    term.wait_for(lambda s: row(s, VM) and "filter: a100" in s and not row(s, "trainer-l4-1"),
                  "the table filtered to one machine", timeout=45)  # fmt: skip

    term.press("s")
    term.wait_for(lambda s: re.search(r"\brunning\b", row(s, VM)), f"the job running on {VM}", timeout=45)
    record()

    term.press("l")
    first = term.wait_for(
        lambda s: max(_steps(s), default=0), "a training step line in the log pane", timeout=60
    )
    assert f"{VM} live" in term.screen(), "the pane is titled with the machine and follows it"
    later = term.wait_for(lambda s: max(_steps(s), default=0) > first and max(_steps(s)), "more log lines arriving",
                          timeout=30)  # fmt: skip
    assert later > first
    assert STEP_LINE.search(term.screen())
    record()

    term.press("Escape")
    term.wait_for(
        lambda s: re.search(r"\brunning\b", row(s, VM)) and "Zone" in s, "back on the fleet", timeout=15
    )
    term.press("q")
    assert term.wait_exit(timeout=45) == 0

    left = wait_no_leftovers(marker, demo_run.seen, timeout=20, ignore=[term.server_pid()])
    assert not left, "processes of the demo still running after quit:\n" + "\n".join(left)
    assert not demo_dir.exists(), f"the demo's temp dir {demo_dir} is still there"


@pytest.mark.timeout(180)
def test_closing_the_terminal_during_a_job_leaves_nothing_running(demo_run: DemoRun) -> None:
    term, marker = demo_run.terminal, str(demo_run.tmpdir)
    argv, _which = gcptui_command()
    pane = term.start([*argv, "demo"], cwd=ROOT, env=demo_env(demo_run.tmpdir))
    term.wait_for(lambda s: re.search(r"RUNNING.*\bnone\b", row(s, VM)), f"{VM} reachable", timeout=45)
    term.press("Down")  # sorted by name, the first row is eval-t4-1 (TERMINATED); the next is the VM
    term.press("s")
    term.wait_for(lambda s: re.search(r"\brunning\b", row(s, VM)), f"the job running on {VM}", timeout=45)
    demo_run.seen.update(descendants(pane))

    term.close()  # the terminal goes away: tmux sends SIGHUP to the app, as a closed window or SSH drop does

    # Quitting takes 1.5-3 s, and over 12 s at a load of 5 on 2 cores: a deadline, not a pace.
    left = wait_no_leftovers(marker, demo_run.seen, timeout=60)
    assert not left, "processes of the demo still running after its terminal closed:\n" + "\n".join(left)
    assert not list(demo_run.tmpdir.glob("gcptui-demo-*")), "the demo's temp dir is still there"
