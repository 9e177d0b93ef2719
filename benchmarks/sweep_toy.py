"""A toy training for sweep benchmarks and tests: a loss curve that depends on the parameters.

    python sweep_toy.py --run-dir DIR --lr LR --x X [--steps 40] [--step-delay 0]

The final loss is ``0.1 + 0.5 * (log10(lr) - log10(3e-3))**2 + (x - 0.3)**2``: its optimum, 0.1, is
known (lr = 3e-3, x = 0.3). The curve decays towards it, faster with a larger ``lr``, so a trial's
rank early on is close to (not always) its final rank, as in real training. Each step appends
``{"step", "total_steps", "loss"}`` to ``DIR/metrics.jsonl`` (the progress protocol; to stdout when
``GCPTUI_METRICS=/dev/stdout``, as on Vertex AI and GKE); SIGTERM
(a pruned trial) writes ``DIR/stopped`` with the last step and exits 143. Standard library only: it
runs on the emulator's VMs as is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time

OPTIMUM = 0.1
BEST_LR, BEST_X = 3e-3, 0.3


def final_loss(lr: float, x: float) -> float:
    return OPTIMUM + 0.5 * (math.log10(lr) - math.log10(BEST_LR)) ** 2 + (x - BEST_X) ** 2


def loss_at(step: int, steps: int, lr: float, x: float) -> float:
    """The loss after ``step`` of ``steps``: the final loss plus a transient that a larger lr ends sooner."""
    speed = 3.0 + math.log10(lr / 1e-4)  # 3 at lr 1e-4 .. 6 at lr 1e-1
    return final_loss(lr, x) + 1.5 * math.exp(-speed * step / max(1, steps))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--x", type=float, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-delay", type=float, default=0.0)
    args = parser.parse_args()
    os.makedirs(args.run_dir, exist_ok=True)
    done = {"step": -1}

    def stop(_signum: int, _frame: object) -> None:
        with open(os.path.join(args.run_dir, "stopped"), "w") as out:
            out.write(f"{done['step']}\n")
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    # GCPTUI_METRICS when it is the job's stdout (a Vertex AI or GKE trial: its logs are read);
    # otherwise the run directory's file, where a VM's trial is read.
    metrics = os.environ.get("GCPTUI_METRICS", "")
    path = metrics if metrics == "/dev/stdout" else os.path.join(args.run_dir, "metrics.jsonl")
    with open(path, "a") as out:
        for step in range(1, args.steps + 1):
            record = {
                "step": step,
                "total_steps": args.steps,
                "loss": loss_at(step, args.steps, args.lr, args.x),
            }
            out.write(json.dumps(record) + "\n")
            out.flush()
            done["step"] = step
            time.sleep(args.step_delay)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
