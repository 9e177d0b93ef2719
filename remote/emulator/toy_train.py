"""A torch-free stand-in for the reference run, for ``gcptui demo`` on a machine without PyTorch.

``python toy_train.py --run-dir DIR --steps N [--resume] [--checkpoint-every K] [--log-every K]
[--step-delay S] [--seed S]`` fits a small linear model with SGD in plain Python. It keeps the
contracts that matter to gcptui: progress lines of the protocol, atomic checkpoints (temporary file,
fsync, rename, directory fsync), a checkpoint at once on SIGTERM and exit 143 (reported as a
preemption only when the job supervisor saw GCE's notice; a kill reads "stopped"), and an exact resume
(the data of step ``k`` is a pure function of the seed and ``k``, so losses after a resume equal an
uninterrupted run's). The real trainer (``python -m gcptui_trainer``) is what users adopt; this only lets
the demo show the whole loop where torch is not installed. It is one self-contained file: the demo
writes it into its project, which sync then carries to the VMs like any user's code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path


class MetricsLog:
    """The progress protocol's JSON lines, appended to `$GCPTUI_METRICS` (else RUN_DIR/metrics.jsonl)."""

    def __init__(self, run_dir: Path) -> None:
        path = Path(os.environ.get("GCPTUI_METRICS") or run_dir / "metrics.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def progress(self, step: int, total_steps: int, loss: float, samples_per_s: float) -> None:
        self._write(
            {
                "step": step,
                "total_steps": total_steps,
                "loss": loss,
                "samples_per_s": round(samples_per_s, 3),
                "time": time.time(),
            },
            f"step {step}/{total_steps} loss {loss:.4f} {samples_per_s:.0f} samples/s",
        )

    def event(self, name: str, text: str, **fields: object) -> None:
        self._write({"event": name, **fields, "time": time.time()}, text)

    def say(self, text: str) -> None:
        print(text, flush=True)

    def close(self) -> None:
        self._file.close()

    def _write(self, record: dict[str, object], text: str) -> None:
        # json.dumps writes floats with repr(), which round-trips a Python float exactly.
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self.say(text)


FEATURES = 8
CHECKPOINT = "toy-checkpoint.json"
PREEMPTED_EXIT_CODE = 143


def batch(seed: int, step: int, size: int = 16) -> list[tuple[list[float], float]]:
    """The samples of one step: depends only on (seed, step), which makes resume exact."""
    rng = random.Random(seed * 1_000_003 + step)
    truth = [((i % 3) - 1) * 0.5 + 0.1 * i for i in range(FEATURES)]
    rows = []
    for _ in range(size):
        x = [rng.gauss(0.0, 1.0) for _ in range(FEATURES)]
        rows.append((x, sum(w * v for w, v in zip(truth, x, strict=True)) + rng.gauss(0.0, 0.1)))
    return rows


def sgd_step(weights: list[float], rows: list[tuple[list[float], float]], lr: float) -> float:
    """One step of mean-squared-error SGD; returns the loss before the update."""
    grads = [0.0] * FEATURES
    loss = 0.0
    for x, y in rows:
        error = sum(w * v for w, v in zip(weights, x, strict=True)) - y
        loss += error * error
        for i, v in enumerate(x):
            grads[i] += 2.0 * error * v
    for i in range(FEATURES):
        weights[i] -= lr * grads[i] / len(rows)
    return loss / len(rows)


def save(run_dir: Path, step: int, weights: list[float], seed: int) -> Path:
    """Atomically: readers see the old checkpoint or the new one, never half of one."""
    path = run_dir / CHECKPOINT
    tmp = run_dir / f".{CHECKPOINT}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"step": step, "weights": weights, "seed": seed}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(run_dir, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def stop_cause() -> str:
    """``preempted`` when gcptui's job supervisor recorded a preemption (or host maintenance) notice
    before sending SIGTERM (it writes ``$GCPTUI_JOB_DIR/preempted`` first), else ``stopped``: a
    kill from a person (``K``, ``gcptui job kill``) or anything else that sent SIGTERM."""
    job_dir = os.environ.get("GCPTUI_JOB_DIR")
    return "preempted" if job_dir and (Path(job_dir) / "preempted").exists() else "stopped"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python toy_train.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = run_dir / CHECKPOINT
    if checkpoint.exists() and not args.resume:
        print(f"error: {run_dir} already holds a checkpoint: pass --resume to continue it", file=sys.stderr)
        return 2
    log = MetricsLog(run_dir)
    step, weights = 0, [0.0] * FEATURES
    if checkpoint.exists():
        state = json.loads(checkpoint.read_text())
        if state.get("seed") != args.seed:
            print(
                f"error: the checkpoint in {run_dir} is for seed {state.get('seed')}: use it", file=sys.stderr
            )
            return 2
        step, weights = int(state["step"]), [float(w) for w in state["weights"]]
        log.event("resumed", f"resumed from step {step}", step=step, path=str(checkpoint))
    else:
        log.say(f"starting a new toy run in {run_dir} (torch is not installed here)")
    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))  # finish the step, then save
    started, done_at_start = time.monotonic(), step
    while step < args.steps:
        loss = sgd_step(weights, batch(args.seed, step), args.lr)
        step += 1
        # The first step of this process too, as the reference trainer does.
        if step % args.log_every == 0 or step == args.steps or step == done_at_start + 1:
            rate = (step - done_at_start) * 16 / max(1e-9, time.monotonic() - started)
            log.progress(step, args.steps, loss, rate)
        if stop["asked"]:
            path = save(run_dir, step, weights, args.seed)
            log.event("checkpoint", f"checkpoint step {step} saved to {path}", step=step, path=str(path))
            if stop_cause() == "preempted":
                log.event("preempted", f"preempted: saved step {step}, exiting", step=step)
            else:
                log.event(
                    "stopped",
                    f"stopped by SIGTERM (no preemption notice): saved step {step}, exiting",
                    step=step,
                )
            log.close()
            return PREEMPTED_EXIT_CODE
        if step % args.checkpoint_every == 0:
            path = save(run_dir, step, weights, args.seed)
            log.event("checkpoint", f"checkpoint step {step} saved to {path}", step=step, path=str(path))
        if args.step_delay:
            time.sleep(args.step_delay)
    save(run_dir, step, weights, args.seed)
    log.event("finished", f"finished at step {step}", step=step)
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
