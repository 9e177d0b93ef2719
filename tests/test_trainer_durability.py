"""A checkpoint on disk is never lost to a rewrite, a failed write or pruning; a failed save is never
reported as a saved one. Failures are real: a child process killed mid-write, RLIMIT_FSIZE (EFBIG)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from gcptui_trainer import ResumableRun
from gcptui_trainer.checkpoint import KILL_DURING_SAVE_ENV, CheckpointStore
from tests.test_trainer_support import REPO, events, read_records, trainer_env

# A user's loop in a child process: at step LIMIT_AT its files may no longer grow past LIMIT bytes
# (a full disk, as the kernel reports it: EFBIG), and at step TERM_AT it gets SIGTERM.
_SCRIPT = textwrap.dedent(
    """
    import os, resource, signal, sys
    import torch
    from torch import nn
    import gcptui_trainer

    run_dir, total, limit_at, term_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

    def train():
        torch.manual_seed(0)
        model = nn.Linear(256, 256)  # a payload of ~260 kB, far above the limit; metrics stay below
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        run = gcptui_trainer.ResumableRun(run_dir, model=model, optimizer=optimizer, total_steps=total,
                                          checkpoint_every=10, log_every=5)
        run.start_epoch()
        while not run.done:
            loss = model(torch.ones(2, 256)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.add_progress(loss.detach(), samples=2)
            if run.step == limit_at:
                run.save_progress(wait=True)  # nothing in flight: the limit hits the next save only
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
            if run.step == term_at:
                os.kill(os.getpid(), signal.SIGTERM)
        run.finished()

    gcptui_trainer.main(train)
    """
)


def _run_script(
    run_dir: Path, total: int, limit_at: int, term_at: int = -1
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(run_dir), str(total), str(limit_at), str(term_at)],
        cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _state(value: float) -> dict:
    return {"weights": torch.full((128, 128), value)}


def test_a_rewrite_of_a_step_killed_part_way_leaves_the_complete_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    CheckpointStore(directory).write(10, _state(1.0), {"epoch": 0})
    for phase in ("payload", "manifest"):
        code = textwrap.dedent(
            f"""
            import torch
            from gcptui_trainer.checkpoint import CheckpointStore
            CheckpointStore({str(directory)!r}).write(10, {{"weights": torch.full((512, 512), 2.0)}}, {{"epoch": 1}})
            """
        )
        env = trainer_env({KILL_DURING_SAVE_ENV: f"10:{phase}"})
        result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, timeout=60)
        assert result.returncode == -signal.SIGKILL
        store = CheckpointStore(directory)
        loaded = store.load_newest()
        assert loaded is not None, f"killed in the {phase}: the complete checkpoint of step 10 is gone"
        info, state = loaded
        assert info.step == 10 and info.manifest["epoch"] == 0 and float(state["weights"][0, 0]) == 1.0
        store.remove_incomplete()
        assert sorted(p.name for p in directory.iterdir()) == ["step-000000010.json", "step-000000010.pt"]


def test_a_rewrite_replaces_the_payload_through_the_manifest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    store.write(10, _state(1.0), {"epoch": 0})
    info = store.write(10, _state(2.0), {"epoch": 1})
    assert info.payload.name != "step-000000010.pt" and info.manifest["payload"] == info.payload.name
    assert sorted(p.name for p in store.directory.iterdir()) == sorted(
        ["step-000000010.json", info.payload.name]
    )
    loaded = store.load_newest()
    assert (
        loaded is not None and loaded[0].manifest["epoch"] == 1 and float(loaded[1]["weights"][0, 0]) == 2.0
    )
    store.remove_incomplete()  # the payload the manifest names is not an orphan
    assert info.payload.exists()


def test_preemption_after_a_checkpoint_of_the_same_step_does_not_rewrite_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ResumableRun(tmp_path / "run", model=model, optimizer=optimizer, total_steps=20, checkpoint_every=10,
                       exit_on_preemption=False)  # fmt: skip
    run.start_epoch()
    for _ in range(10):
        optimizer.step()
        run.add_progress(0.5, samples=1)
    run.save_progress(wait=True)  # the in-flight write of step 10 is done
    payload = run.store.payload_path(10)
    before = payload.stat()
    os.kill(os.getpid(), signal.SIGTERM)  # during "an evaluation": the state is still step 10's
    assert run.check_preemption()
    after = payload.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    records = read_records(tmp_path / "run")
    assert [e["step"] for e in events(records, "checkpoint")] == [10]
    assert events(records, "preempted")[-1]["saved"] is True


def test_a_failed_final_save_fails_the_run_and_leaves_no_debris(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = _run_script(run_dir, total=20, limit_at=15)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "final checkpoint (step 20) could not be written" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    records = read_records(run_dir)
    assert not events(records, "finished")
    assert events(records, "checkpoint_failed")[-1]["step"] == 20
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["step-000000010.json", "step-000000010.pt", "step-000000015.json", "step-000000015.pt"]


def test_a_failed_preemption_save_says_saved_false(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = _run_script(run_dir, total=40, limit_at=12, term_at=13)
    assert result.returncode == 143, result.stdout + result.stderr
    preempted = events(read_records(run_dir), "preempted")[-1]
    assert preempted["step"] == 14 and preempted["saved"] is False and preempted["mirrored"] is None
    assert "could NOT be saved" in result.stdout and "newest saved is step 12" in result.stdout
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["step-000000010.json", "step-000000010.pt", "step-000000012.json", "step-000000012.pt"]
    assert json.loads((run_dir / "checkpoints" / "step-000000012.json").read_text())["step"] == 12


def _steps(run: ResumableRun, model: nn.Module, optimizer: torch.optim.Optimizer, count: int) -> None:
    for _ in range(count):
        loss = model(torch.ones(2, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.add_progress(loss.detach(), samples=2)


def _linear_run(
    run_dir: Path, keep: int, resume: bool
) -> tuple[ResumableRun, nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ResumableRun(run_dir, model=model, optimizer=optimizer, total_steps=100, checkpoint_every=10,
                       keep=keep, resume=resume, exit_on_preemption=False)  # fmt: skip
    run.start_epoch()
    return run, model, optimizer


def test_a_damaged_newer_checkpoint_never_makes_pruning_delete_the_good_ones(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run, model, optimizer = _linear_run(run_dir, keep=2, resume=False)
    _steps(run, model, optimizer, 30)
    run.save_progress(wait=True)
    run.close()
    newest = run.store.payload_path(30)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # bit rot in the newest
    newest.write_bytes(bytes(data))

    resumed, model, optimizer = _linear_run(run_dir, keep=1, resume=True)
    assert resumed.step == 20
    _steps(resumed, model, optimizer, 4)
    resumed.save_progress(wait=True)  # step 24: the one just written must survive pruning
    resumed.close()
    assert [c.step for c in resumed.store.checkpoints()] == [24]
    resumed.store.verify(resumed.store.checkpoints()[0])
    aside = run_dir / "checkpoints" / "damaged"
    assert sorted(p.name for p in aside.iterdir()) == ["step-000000030.json", "step-000000030.pt"]

    again, _, _ = _linear_run(run_dir, keep=1, resume=True)
    assert again.step == 24
    again.close()


def _strict_json(line: str) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_progress_lines_stay_json_when_the_loss_is_not_finite(tmp_path: Path) -> None:
    from gcptui.remote.telemetry.progress import ProgressTracker

    torch.manual_seed(0)
    run = ResumableRun(
        tmp_path / "run", model=nn.Linear(2, 2), total_steps=4, checkpoint_every=0, log_every=1
    )
    run.start_epoch()
    for loss in (1.5, float("nan"), float("inf"), torch.tensor(float("-inf"))):
        run.add_progress(loss, samples=1)
    run.log_event(
        "evaluation", val_loss=float("nan"), scores=[1.0, float("inf")], best=torch.tensor(float("nan"))
    )
    run.finished()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [_strict_json(line) for line in lines]
    assert [r["loss"] for r in records if "loss" in r] == [1.5, None, None, None]
    evaluation = events(records, "evaluation")[0]
    assert (
        evaluation["val_loss"] is None and evaluation["scores"] == [1.0, None] and evaluation["best"] is None
    )
    tracker = ProgressTracker()
    for line in lines:
        tracker.feed(line)
    assert tracker.progress.step == 4


def _run_with_a_rewritten_step_20(run_dir: Path) -> CheckpointStore:
    run, model, optimizer = _linear_run(run_dir, keep=3, resume=False)
    _steps(run, model, optimizer, 20)
    run.save_progress(wait=True)
    run.end_epoch()
    run.save_progress(wait=True)  # the same step, a later epoch: a rewrite (step-N.TOKEN.pt)
    run.close()
    return run.store


def test_a_rewritten_checkpoint_with_a_torn_manifest_is_set_aside_whole(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    store = _run_with_a_rewritten_step_20(run_dir)
    payload = store.checkpoints()[0].payload
    assert payload.name.startswith("step-000000020.") and payload != store.payload_path(20)
    manifest = store.manifest_path(20)
    manifest.write_bytes(manifest.read_bytes()[:20])

    resumed, _, _ = _linear_run(run_dir, keep=3, resume=True)
    resumed.close()
    assert resumed.step == 10
    aside = run_dir / "checkpoints" / "damaged"
    assert sorted(p.name for p in aside.iterdir()) == sorted([manifest.name, payload.name])  # the payload too


def test_a_manifest_that_cannot_be_read_stops_the_resume_and_moves_nothing(tmp_path: Path) -> None:
    from gcptui_trainer.errors import TrainerError

    run_dir = tmp_path / "run"
    store = _run_with_a_rewritten_step_20(run_dir)
    manifest = store.manifest_path(20)
    manifest.unlink()
    manifest.mkdir()  # a real OSError on reading it (IsADirectoryError), standing in for EIO or EACCES
    before = sorted(p.name for p in store.directory.iterdir())
    with pytest.raises(TrainerError, match="cannot read checkpoint manifest") as caught:
        _linear_run(run_dir, keep=3, resume=True)
    assert "\n" not in str(caught.value)
    assert sorted(p.name for p in store.directory.iterdir()) == before  # nothing set aside or deleted
