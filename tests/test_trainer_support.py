"""Helpers for the trainer tests: launch real `python -m gcptui_trainer` processes and read their metrics.

No test lives here; the other test_trainer_* modules import these helpers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
CHECKPOINT_ENV_HOOK = "GCPTUI_TRAINER_TEST_KILL_DURING_SAVE"


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GCPTUI_METRICS", None)
    env.pop(CHECKPOINT_ENV_HOOK, None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class TrainerProcess:
    """A running trainer (plain or under torchrun) whose output goes to a log file."""

    popen: subprocess.Popen
    log: Path
    metrics: Path
    metrics_offset: int  # where this process's lines start in the shared metrics file
    _seen: list[dict[str, Any]] = field(default_factory=list)

    def new_records(self) -> list[dict[str, Any]]:
        """Metrics lines written since this process started (complete lines only)."""
        if not self.metrics.exists():
            return []
        with open(self.metrics, "rb") as file:
            file.seek(self.metrics_offset)
            data = file.read()
        lines = data.split(b"\n")[:-1]  # the last element is an incomplete line or b""
        return [json.loads(line) for line in lines if line.strip()]

    def last_step(self) -> int:
        steps = [r["step"] for r in self.new_records() if "loss" in r]
        return max(steps, default=0)

    def wait_until(self, condition: Callable[[list[dict[str, Any]]], bool], timeout: float = 60.0) -> bool:
        """Poll the metrics until `condition(new_records)` holds (True) or the process exits (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.new_records()):
                return True
            if self.popen.poll() is not None:
                return condition(self.new_records())
            time.sleep(0.005)  # polling interval, not synchronization: the condition decides
        raise AssertionError(f"timed out waiting on the trainer; log:\n{self.output()}")

    def wait_for_step(self, step: int, timeout: float = 60.0) -> bool:
        return self.wait_until(
            lambda records: any(r.get("step", -1) >= step and "loss" in r for r in records), timeout
        )

    def finish(self, timeout: float = 120.0) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise AssertionError(f"trainer did not exit; log:\n{self.output()}") from None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


_launches = 0


def start_trainer(
    run_dir: Path, *args: str, env: dict[str, str] | None = None, nproc: int = 1
) -> TrainerProcess:
    """Start `python -m gcptui_trainer --run-dir RUN_DIR ARGS` (under torchrun when nproc > 1)."""
    global _launches
    _launches += 1
    log = run_dir.parent / f"{run_dir.name}-log-{_launches}.txt"
    metrics = run_dir / "metrics.jsonl"
    offset = metrics.stat().st_size if metrics.exists() else 0
    if nproc > 1:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            "-m",
            "gcptui_trainer",
        ]
    else:
        launcher = [sys.executable, "-m", "gcptui_trainer"]
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            [*launcher, "--run-dir", str(run_dir), *args],
            cwd=REPO,
            env=trainer_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so a test can kill torchrun and its workers together
        )
    return TrainerProcess(popen, log, metrics, offset)


def run_trainer(
    run_dir: Path, *args: str, env: dict[str, str] | None = None, nproc: int = 1
) -> tuple[int, str]:
    """Run the trainer to its end; returns (exit code, combined output)."""
    process = start_trainer(run_dir, *args, env=env, nproc=nproc)
    code = process.finish()
    return code, process.output()


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1] if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def losses_by_step(records: list[dict[str, Any]]) -> dict[int, float]:
    """step -> loss; a step logged twice (after a resume) must have logged the same loss."""
    losses: dict[int, float] = {}
    for record in records:
        if "loss" not in record:
            continue
        step, loss = record["step"], record["loss"]
        assert losses.setdefault(step, loss) == loss, f"step {step} logged {losses[step]!r} and then {loss!r}"
    return losses


def events(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == name]


def checkpoint_state(run_dir: Path, step: int) -> dict[str, Any]:
    """The state of checkpoint `step`, from the payload its manifest names (a rewritten step's has its own)."""
    checkpoints = run_dir / "checkpoints"
    manifest = json.loads((checkpoints / f"step-{step:09d}.json").read_text())
    return torch.load(checkpoints / manifest["payload"], weights_only=True)


def assert_same_tensors(a: Any, b: Any, where: str = "") -> None:
    """Deep equality, bit for bit for tensors."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), (
            f"tensor differs at {where}"
        )
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"keys differ at {where}"
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), f"lengths differ at {where}"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{index}]")
    else:
        assert a == b, f"{a!r} != {b!r} at {where}"


def assert_same_run(reference: Path, interrupted: Path, steps: int) -> None:
    """Every step the interrupted run logged has the reference's loss; final state identical."""
    expected = losses_by_step(read_records(reference))
    got = losses_by_step(read_records(interrupted))
    assert sorted(got) == list(range(1, steps + 1)), "the interrupted run did not log every step"
    mismatched = [(s, expected[s], got[s]) for s in got if got[s] != expected[s]]
    assert not mismatched, f"losses differ (step, reference, resumed): {mismatched[:5]}"
    final_ref, final_got = checkpoint_state(reference, steps), checkpoint_state(interrupted, steps)
    for part in ("model", "optimizer", "scheduler", "progress", "rng"):
        assert_same_tensors(final_ref[part], final_got[part], part)
