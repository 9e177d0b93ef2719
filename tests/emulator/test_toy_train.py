"""The demo's torch-free workload keeps the resume contract: SIGTERM saves, --resume is exact."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

TOY = Path(__file__).resolve().parents[2] / "remote" / "emulator" / "toy_train.py"
# Run as a machine without torch would: any `import torch` fails.
NO_TORCH = "import sys, runpy; sys.modules['torch'] = None; sys.argv[0] = 'toy'; runpy.run_path(sys.argv.pop(1), run_name='__main__')"


def toy(run_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", NO_TORCH, str(TOY), "--run-dir", str(run_dir), "--log-every", "1", *args],
        cwd=run_dir.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def records(run_dir: Path) -> list[dict[str, object]]:
    """The run's metrics records, complete lines only: it may be writing the last one right now."""
    text = (run_dir / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def losses(run_dir: Path) -> dict[int, float]:
    rows = records(run_dir)
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def test_sigterm_then_resume_gives_the_uninterrupted_losses_without_torch(tmp_path: Path) -> None:
    straight = toy(tmp_path / "straight", "--steps", "300")
    assert straight.wait(60) == 0, straight.stderr.read() if straight.stderr else ""

    cut = tmp_path / "cut"
    first = toy(cut, "--steps", "300", "--step-delay", "0.01")
    deadline = time.monotonic() + 30
    while not (cut / "metrics.jsonl").exists() or len(losses(cut)) < 40:
        assert time.monotonic() < deadline and first.poll() is None, "the toy run never got going"
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 143
    saved = json.loads((cut / "toy-checkpoint.json").read_text())["step"]
    assert saved == max(losses(cut))  # the step it was on when the notice came: none lost

    refused = toy(cut, "--steps", "300")
    assert refused.wait(30) == 2  # a directory with a checkpoint needs --resume
    second = toy(cut, "--steps", "300", "--resume")
    assert second.wait(60) == 0
    assert losses(cut) == losses(tmp_path / "straight")


def events(run_dir: Path) -> list[str]:
    rows = records(run_dir)
    return [row["event"] for row in rows if "event" in row]


def sigterm_run(run_dir: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    run = toy(run_dir, "--steps", "100000", "--step-delay", "0.01", env=env)
    deadline = time.monotonic() + 30
    while not (run_dir / "metrics.jsonl").exists() or len(losses(run_dir)) < 3:
        assert time.monotonic() < deadline and run.poll() is None, "the toy run never got going"
        time.sleep(0.02)
    run.send_signal(signal.SIGTERM)
    assert run.wait(30) == 143
    return run


def test_a_kill_is_not_called_a_preemption_but_a_recorded_notice_is(tmp_path: Path) -> None:
    import os

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, "GCPTUI_JOB_DIR": str(job_dir)}
    killed = sigterm_run(tmp_path / "killed", env)  # no notice recorded: a person's kill
    out = killed.stdout.read() if killed.stdout else ""
    assert "stopped by SIGTERM" in out and "preempted" not in out
    assert "preempted" not in events(tmp_path / "killed") and "stopped" in events(tmp_path / "killed")

    (job_dir / "preempted").write_text("2026-11-20T12:00:00Z\n")  # the supervisor's notice record
    preempted = sigterm_run(tmp_path / "preempted", env)
    assert "preempted: saved step" in (preempted.stdout.read() if preempted.stdout else "")
    assert "preempted" in events(tmp_path / "preempted")


def test_the_first_step_of_each_start_is_logged_as_the_reference_trainer_does(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    logged = []
    for steps, more in (("7", ()), ("12", ("--resume",))):
        # The later --log-every wins over toy()'s --log-every 1.
        done = toy(run_dir, "--steps", steps, "--checkpoint-every", "100", *more, "--log-every", "5")
        assert done.wait(60) == 0, done.stderr.read() if done.stderr else ""
        rows = records(run_dir)
        logged = [row["step"] for row in rows if "loss" in row]
    assert logged == [1, 5, 7, 8, 10, 12]
