"""run.save_artifact is atomic (kill -9 mid-write leaves the previous file whole); main() turns errors into one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gcptui_trainer import PREEMPTED_EXIT_CODE, Preempted, ResumableRun, main
from gcptui_trainer.artifacts import KILL_DURING_ARTIFACT_ENV
from tests.test_trainer_support import REPO, trainer_env

# Writes version 1 of best.pt whole, then is SIGKILLed (by the test hook) half-way through version 2.
_WRITER = """
import os, sys, torch
from torch import nn
from gcptui_trainer import ResumableRun
run = ResumableRun(sys.argv[1], model=nn.Linear(1, 1), total_steps=1)
run.save_artifact("best.pt", {"version": 1, "weights": torch.full((512, 512), 1.0)})
os.environ[sys.argv[2]] = "best.pt"
run.save_artifact("best.pt", {"version": 2, "weights": torch.full((512, 512), 2.0)})
print("not reached", flush=True)
"""


def test_an_artifact_is_never_seen_half_written_after_kill_9_during_the_write(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(run_dir), KILL_DURING_ARTIFACT_ENV],
        cwd=REPO,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    artifacts = run_dir / "artifacts"
    debris = [p.name for p in artifacts.iterdir() if p.name.startswith(".tmp-")]
    assert debris, "the kill did not land inside the second write"
    best = torch.load(artifacts / "best.pt", weights_only=True)  # whole, and still the first version
    assert best["version"] == 1 and torch.equal(best["weights"], torch.full((512, 512), 1.0))

    run = ResumableRun(run_dir, model=nn.Linear(1, 1), total_steps=1)  # a relaunch clears the debris
    assert sorted(p.name for p in artifacts.iterdir()) == ["best.pt"]
    assert run.artifact_path("best.pt") == artifacts / "best.pt"
    run.close()


def test_save_artifact_copies_files_writes_bytes_and_refuses_names_outside_the_run(tmp_path: Path) -> None:
    run = ResumableRun(tmp_path / "run", model=nn.Linear(1, 1), total_steps=1)
    source = tmp_path / "predictions.csv"
    source.write_text("a,b\n1,2\n")
    assert run.save_artifact("eval/predictions.csv", source).read_text() == "a,b\n1,2\n"
    assert run.save_artifact("notes.txt", b"hello").read_bytes() == b"hello"
    for bad in ("../escape.pt", "/abs.pt", ".tmp-x"):
        with pytest.raises(ValueError, match="inside the run directory"):
            run.save_artifact(bad, b"x")
    run.close()


def _refused_fresh_run(run_dir: Path) -> None:
    ResumableRun(run_dir, model=nn.Linear(1, 1), total_steps=1, resume=False).close()


def test_main_turns_library_errors_into_one_line_and_exit_2_naming_the_scripts_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = ResumableRun(tmp_path / "run", model=nn.Linear(1, 1), total_steps=1)
    run.add_progress(0.0, samples=1)
    run.finished()
    capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        main(_refused_fresh_run, tmp_path / "run", resume_flag="--continue-training")
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and err.startswith("error: ") and "pass --continue-training to continue" in err
    )

    with pytest.raises(SystemExit) as caught:
        main(lambda: None)
    assert caught.value.code == 0

    def preempted() -> None:
        raise Preempted(5, PREEMPTED_EXIT_CODE)

    with pytest.raises(SystemExit) as caught:
        main(preempted)
    assert caught.value.code == PREEMPTED_EXIT_CODE

    def bug() -> None:
        raise ZeroDivisionError("a bug in the script keeps its traceback")

    with pytest.raises(ZeroDivisionError):
        main(bug)
