"""The reference trainer on a real GPU: exact resume after SIGKILL and SIGTERM, checkpoint cost, NCCL.

    python benchmarks/trainer_gpu.py [--size base] [--steps 300] [--out DIR]

Runs `python -m gcptui_trainer` as a user would (CUDA when available, else CPU), each run in its own
process: an uninterrupted reference run; a run SIGKILLed then resumed; a run SIGTERMed (the Spot
notice) then resumed, timing SIGTERM to exit; throughput without checkpoints and with one every 100
steps; `torchrun` with one process per GPU (NCCL on CUDA); and the raw `nvidia-smi` output of the
GPU monitor's own queries while a run trains, saved under --out for the parser. Per-step losses of
the interrupted runs are compared with the reference bit for bit.

Prints progress to stderr and one JSON object as its last stdout line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_run import owned_run, quick, quick_flag

GPU_FIELDS = "index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"
PROCESS_FIELDS = "pid,process_name,used_memory"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by SIGKILL
    return out


def losses(run_dir: Path) -> dict[int, float]:
    """The loss of each step; a step logged twice (redone after a kill) keeps its last value."""
    return {r["step"]: r["loss"] for r in records(run_dir) if "loss" in r}


def launch(run_dir: Path, args: list[str], launcher: list[str] | None = None) -> subprocess.Popen[bytes]:
    command = [*(launcher or [sys.executable]), "-m", "gcptui_trainer", "--run-dir", str(run_dir), *args]
    env = {k: v for k, v in os.environ.items() if k != "GCPTUI_METRICS"}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_step(run_dir: Path, step: int, process: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.get("step", 0) >= step and "loss" in r for r in records(run_dir)):
            return
        if process.poll() is not None:
            raise RuntimeError(
                f"trainer exited with {process.returncode}: {process.stderr.read().decode()[-2000:]}"
            )  # type: ignore[union-attr]
        time.sleep(0.01)
    raise TimeoutError(f"step {step} not reached")


def finish(process: subprocess.Popen[bytes], timeout: float = 900) -> int:
    _, err = process.communicate(timeout=timeout)
    if process.returncode not in (0, 143):
        raise RuntimeError(f"trainer exited with {process.returncode}: {err.decode()[-2000:]}")
    return process.returncode


def compare(reference: dict[int, float], got: dict[int, float]) -> dict:
    steps = sorted(reference)
    differing = [s for s in steps if got.get(s) != reference[s]]
    return {"steps": len(steps), "bit_identical": not differing and len(got) == len(reference),
            "first_differing_step": differing[0] if differing else None}  # fmt: skip


def rate(run_dir: Path, skip: int) -> float:
    """Steps per second between step `skip` and the last step (process start-up left out)."""
    rows = [r for r in records(run_dir) if "loss" in r]
    first = next(r for r in rows if r["step"] >= skip)
    last = rows[-1]
    return (last["step"] - first["step"]) / (last["time"] - first["time"])


def snapshot_nvidia_smi(out: Path) -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"nvidia_smi": None}
    for name, query in (
        ("gpu", f"--query-gpu={GPU_FIELDS}"),
        ("apps", f"--query-compute-apps={PROCESS_FIELDS}"),
    ):
        result = subprocess.run([smi, query, "--format=csv,noheader,nounits"], capture_output=True, text=True)
        (out / f"nvidia-smi-{name}.csv").write_text(result.stdout)
    (out / "nvidia-smi.txt").write_text(subprocess.run([smi], capture_output=True, text=True).stdout)
    return {"nvidia_smi": smi}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="base")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--throughput-steps", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None, help="where nvidia-smi output is saved")
    quick_flag(parser)
    args = quick(parser.parse_args(), size="tiny", steps=60)
    with owned_run("trainer_gpu"):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    import torch

    cuda = torch.cuda.is_available()
    result: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                    "size": args.size, "steps": args.steps}  # fmt: skip
    out = args.out or Path(tempfile.mkdtemp(prefix="trainer-gpu-out-"))
    out.mkdir(parents=True, exist_ok=True)
    common = ["--size", args.size, "--steps", str(args.steps), "--log-every", "1", "--checkpoint-every", "50"]
    with tempfile.TemporaryDirectory(prefix="trainer-gpu-") as tmp:
        work = Path(tmp)
        say("reference run")
        started = time.perf_counter()
        reference_process = launch(work / "ref", common)
        wait_step(work / "ref", args.steps // 3, reference_process)
        result.update(snapshot_nvidia_smi(out))  # while it trains: util and the process show
        finish(reference_process)
        result["reference_wall_s"] = round(time.perf_counter() - started, 2)
        reference = losses(work / "ref")

        say("SIGKILL, then resume")
        process = launch(work / "kill", common)
        wait_step(work / "kill", int(args.steps * 0.45), process)
        process.kill()
        process.wait()
        finish(launch(work / "kill", [*common, "--resume"]))
        result["sigkill_resume"] = compare(reference, losses(work / "kill"))

        say("SIGTERM, then resume")
        process = launch(work / "term", common)
        wait_step(work / "term", int(args.steps * 0.6), process)
        started = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        code = finish(process)
        result["sigterm_to_exit_s"] = round(time.perf_counter() - started, 3)
        result["sigterm_exit_code"] = code
        finish(launch(work / "term", [*common, "--resume"]))
        result["sigterm_resume"] = compare(reference, losses(work / "term"))

        say("throughput")
        for every in () if args.quick else (0, 100):  # a quick run: what resumes, not how fast
            run_dir = work / f"tp{every}"
            t_args = ["--size", args.size, "--steps", str(args.throughput_steps), "--log-every", "10",
                      "--checkpoint-every", str(every)]  # fmt: skip
            finish(launch(run_dir, t_args))
            result[f"steps_per_s_checkpoint_every_{every}"] = round(rate(run_dir, 20), 2)
        if not args.quick:
            result["throughput_ratio"] = round(
                result["steps_per_s_checkpoint_every_100"] / result["steps_per_s_checkpoint_every_0"], 4
            )

        torchrun = shutil.which("torchrun")
        if torchrun and not args.quick:  # two more processes importing torch: not for a quick run
            say("torchrun, one process per GPU")
            nproc = max(1, torch.cuda.device_count()) if cuda else 2
            run_dir = work / "torchrun"
            process = launch(run_dir, ["--size", args.size, "--steps", "60", "--log-every", "10"],
                             launcher=[torchrun, "--standalone", f"--nproc-per-node={nproc}"])  # fmt: skip
            _, err = process.communicate(timeout=900)
            result["torchrun"] = {"nproc_per_node": nproc, "backend": "nccl" if cuda else "gloo",
                                  "exit_code": process.returncode, "steps_logged": len(losses(run_dir)),
                                  "stderr_tail": err.decode()[-300:] if process.returncode else ""}  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
