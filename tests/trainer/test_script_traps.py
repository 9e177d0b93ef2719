"""The plain-loop traps of issue #37: each mistake is a one-line error, signals come back, config is whole.

In-process where the behaviour is the library's alone; a real subprocess for exit codes and output.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from gcptui_trainer import DeterministicBatchSampler, ResumableRun, TrainerError
from gcptui_trainer.errors import CheckpointMismatchError
from tests.test_trainer_support import REPO, trainer_env


def _run(run_dir: Path, **options: object) -> ResumableRun:
    torch.manual_seed(0)
    return ResumableRun(run_dir, model=nn.Linear(2, 1), total_steps=4, log_every=1, **options)  # type: ignore[arg-type]


def test_ctrl_c_gives_the_signal_handlers_back(tmp_path: Path) -> None:
    # Ctrl-C as in a terminal: a pytest-xdist worker process ignores SIGINT, which a run hands on.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        run = _run(tmp_path / "run")
        assert signal.getsignal(signal.SIGTERM) != before[0]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        # A later SIGTERM is not swallowed by a run nobody drives any more: it gets the old handler.
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
        assert not run.preemption_requested
    finally:
        signal.signal(signal.SIGINT, outer)


def test_finished_gives_the_signal_handlers_back(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    run = _run(tmp_path / "run")
    while not run.done:
        run.add_progress(0.5, samples=1)
    run.finished()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_artifact_names_are_checked_when_the_run_is_built(tmp_path: Path) -> None:
    with pytest.raises(TrainerError, match="'../best.pt' must be a relative path"):
        _run(tmp_path / "bad", artifacts=("final.pt", "../best.pt"))
    run = _run(tmp_path / "run", artifacts=("final.pt",))
    with pytest.raises(TrainerError, match="'fnial.pt' is not among those declared"):
        run.save_artifact("fnial.pt", b"x")
    assert run.save_artifact("final.pt", b"x").read_bytes() == b"x"
    run.close()


def test_a_whole_namespace_as_config_with_what_may_change(tmp_path: Path) -> None:
    args = argparse.Namespace(run_dir=tmp_path / "run", clip=0.5, log_every=1)
    may_change = ("run_dir", "log_every")
    run = _run(tmp_path / "run", config=args, config_may_change=may_change)
    run.save_progress(wait=True)
    run.close()
    moved = argparse.Namespace(run_dir=Path("/elsewhere"), clip=0.5, log_every=10)
    _run(tmp_path / "run", config=moved, config_may_change=may_change).close()  # allowed to change
    clipped = argparse.Namespace(run_dir=tmp_path / "run", clip=1.0, log_every=1)
    with pytest.raises(CheckpointMismatchError, match="clip=0.5, this run has clip=1.0"):
        _run(tmp_path / "run", config=clipped, config_may_change=may_change)
    with pytest.raises(TrainerError, match=r"config_may_change names \['lr'\]"):
        _run(tmp_path / "other", config=args, config_may_change=("lr",))


@dataclasses.dataclass
class Arguments:  # like HF's TrainingArguments: a dataclass as config
    output_dir: str
    learning_rate: float
    logging_steps: int
    dataloader_num_workers: int


def test_output_paths_logging_and_workers_are_free_in_any_config(tmp_path: Path) -> None:
    first = Arguments(output_dir="out", learning_rate=0.1, logging_steps=10, dataloader_num_workers=0)
    run = _run(tmp_path / "run", config=first)
    run.save_progress(wait=True)
    run.close()
    moved = dataclasses.replace(first, output_dir="/elsewhere", logging_steps=1, dataloader_num_workers=2)
    _run(tmp_path / "run", config=moved).close()  # no config_may_change needed
    faster = dataclasses.replace(first, learning_rate=0.2)
    with pytest.raises(CheckpointMismatchError, match="learning_rate=0.1, this run has learning_rate=0.2"):
        _run(tmp_path / "run", config=faster)


def test_a_buffer_registered_after_the_run_was_built_is_saved_and_resumes_once_registered_first(
    tmp_path: Path,
) -> None:
    model = nn.Linear(2, 1)
    run = ResumableRun(tmp_path / "run", model=model, total_steps=1, echo=False)
    model.register_buffer("ema", torch.full((3,), 0.5))  # after the run was built
    run.add_progress(0.5, samples=1)
    run.finished()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(CheckpointMismatchError, match="register every parameter and buffer before building"):
        ResumableRun(tmp_path / "run", model=nn.Linear(2, 1), total_steps=2, echo=False)  # no traceback
    assert signal.getsignal(signal.SIGTERM) == before  # the failed build gave the handlers back
    fixed = nn.Linear(2, 1)
    fixed.register_buffer("ema", torch.zeros(3))  # registered first: the checkpoint is this model's
    ResumableRun(tmp_path / "run", model=fixed, total_steps=2, echo=False).close()
    assert torch.equal(fixed.state_dict()["ema"], torch.full((3,), 0.5))


def test_sampler_drop_last_false_trains_every_sample_once_an_epoch() -> None:
    kept = DeterministicBatchSampler(70, 4, seed=2, drop_last=False)
    batches = list(kept.batches(3))
    assert len(kept) == kept.steps_per_epoch == 18 and len(batches[-1]) == 2
    assert sorted(i for batch in batches for i in batch.tolist()) == list(range(70))
    assert DeterministicBatchSampler(70, 4, seed=2).steps_per_epoch == 17  # the default drops 2
    with pytest.raises(ValueError, match="drop_last=False needs world_size=1"):
        DeterministicBatchSampler(70, 4, seed=2, rank=0, world_size=2, drop_last=False)


def test_echo_off_keeps_stdout_quiet_and_the_metrics_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path / "run", echo=False)
    while not run.done:
        run.add_progress(0.25, samples=1)
    run.finished()
    assert capsys.readouterr().out == ""
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count('"loss"') == 4


def test_sampler_len_is_the_whole_epoch_and_set_epoch_keeps_a_resume() -> None:
    sampler = DeterministicBatchSampler(40, 4, seed=1)
    sampler.resume_at(2, 7)
    sampler.set_epoch(2)  # what a framework calls: the resume's position stays
    assert len(sampler) == 10 and len(list(sampler)) == 3
    sampler.set_epoch(2)  # the resume is used up: the next pass of epoch 2 is whole
    assert len(list(sampler)) == 10


@pytest.mark.timeout(60)
def test_a_module_level_script_gets_one_line_errors_and_exit_codes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import torch
            import gcptui_trainer
            from gcptui_trainer import ResumableRun

            with gcptui_trainer.script(resume_flag="--continue"):
                run = ResumableRun(sys.argv[1], model=torch.nn.Linear(2, 1), total_steps=2,
                                   resume="--continue" in sys.argv)
                while not run.done:
                    run.add_progress(1.0, samples=1)
                run.finished()
            print("not reached: the block exits")
            """
        )
    )

    def launch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), str(tmp_path / "run"), *args],
            cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=50,
        )  # fmt: skip

    first = launch()
    assert first.returncode == 0, first.stderr
    assert "not reached" not in first.stdout
    again = launch()  # the run dir holds checkpoints and --continue was not given
    assert again.returncode == 2 and "Traceback" not in again.stderr
    (line,) = again.stderr.strip().splitlines()
    assert line.startswith("error: ") and "pass --continue to continue" in line
