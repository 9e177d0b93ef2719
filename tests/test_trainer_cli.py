"""`python -m gcptui_trainer` on bad input and damaged checkpoints: one clear line, exit 2, or a safe fallback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_trainer_support import events, losses_by_step, read_records, run_trainer

ARGS = ("--steps", "60", "--log-every", "1", "--checkpoint-every", "20", "--size", "tiny")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    code, output = run_trainer(run_dir, *ARGS)
    assert code == 0, output
    return run_dir


def _one_error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in output, output
    return errors[0]


def test_refuses_a_run_dir_with_checkpoints_without_resume(finished_run: Path) -> None:
    code, output = run_trainer(finished_run, *ARGS)
    assert code == 2
    assert "already holds checkpoints (newest: step 60)" in _one_error_line(output)
    assert "--resume" in output


def test_checkpoint_of_another_model_size_is_one_clear_line(finished_run: Path) -> None:
    code, output = run_trainer(finished_run, *ARGS, "--size", "small", "--resume")
    assert code == 2
    line = _one_error_line(output)
    assert "another model (size tiny" in line and "this run (size small" in line


def test_truncated_newest_checkpoint_falls_back_to_the_one_before(finished_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    newest = run_dir / "checkpoints" / "step-000000060.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    code, output = run_trainer(run_dir, *ARGS, "--resume", "--steps", "70")
    assert code == 0, output
    assert "warning: checkpoint step 60" in output and "falling back to step 40" in output
    records = read_records(run_dir)
    assert events(records, "resumed")[-1]["step"] == 40
    assert events(records, "checkpoint_damaged")[-1]["step"] == 60
    losses_by_step(records)  # steps 41-60, logged twice, have identical losses


def test_resume_in_an_empty_dir_starts_fresh_and_usage_errors_are_one_line(tmp_path: Path) -> None:
    code, output = run_trainer(tmp_path / "new", "--steps", "3", "--resume")
    assert code == 0 and "starting a new run" in output, output
    code, output = run_trainer(tmp_path / "bad", "--steps", "0")
    assert code == 2 and "--steps: must be at least 1" in _one_error_line(output)
