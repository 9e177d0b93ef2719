"""GPU telemetry over sshd with a stand-in nvidia-smi; the progress protocol; idle detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcptui.remote.telemetry.gpu import GpuHistory, GpuMonitor, GpuSample, GpuSnapshot, parse_gpu_line
from gcptui.remote.telemetry.idle import IdleGpuDetector
from gcptui.remote.telemetry.progress import Progress, ProgressTracker, follow_progress
from tests.logs.conftest import ReconnectingGetter, ssh

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-compute-apps=*) echo "4242, python train.py, 1234"; exit 0;;
  --query-gpu=*)
    i=0
    while :; do
      echo "0, NVIDIA L4, $((i * 10 % 100)), 1000, 23034, 40, 72.5"
      echo "1, NVIDIA L4, 0, 0, 23034, 35, [N/A]"
      i=$((i + 1)); sleep 0.1
    done;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path: Path) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE_SMI)
    path.chmod(0o755)
    return path


async def test_samples_are_grouped_per_round_with_processes(
    get_conn: ReconnectingGetter, fake_smi: Path
) -> None:
    monitor = GpuMonitor(ssh(get_conn), nvidia_smi=str(fake_smi), process_interval=0.2)
    seen: list[GpuSnapshot] = []
    async for snapshot in monitor:
        seen.append(snapshot)
        if snapshot.processes is not None and len(seen) >= 3:
            break
    assert all(s.state == "ok" and [g.index for g in s.gpus] == [0, 1] for s in seen)
    gpu1 = seen[-1].gpus[1]
    assert gpu1 == GpuSample(1, "NVIDIA L4", 0.0, 0.0, 23034.0, 35.0, None)
    assert seen[-1].processes is not None and seen[-1].processes[0].pid == 4242
    assert seen[-1].processes[0].name == "python train.py"


async def test_a_vm_without_nvidia_smi_reads_no_gpu(get_conn: ReconnectingGetter, tmp_path: Path) -> None:
    monitor = GpuMonitor(ssh(get_conn), nvidia_smi=str(tmp_path / "absent" / "nvidia-smi"))
    snapshot = await anext(aiter(monitor))
    assert snapshot.state == "no_gpu" and snapshot.gpus == ()


async def test_a_failing_driver_reads_no_gpu_with_its_message(
    get_conn: ReconnectingGetter, tmp_path: Path
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver'\nexit 9\n"
    )
    smi.chmod(0o755)
    snapshot = await anext(aiter(GpuMonitor(ssh(get_conn), nvidia_smi=str(smi))))
    assert snapshot.state == "no_gpu" and "NVIDIA-SMI has failed" in snapshot.message


def test_gpu_line_parsing_tolerates_not_available_values() -> None:
    sample = parse_gpu_line("3, NVIDIA A100-SXM4-40GB, [N/A], 5, 40960, 31, [Not Supported]")
    assert sample == GpuSample(3, "NVIDIA A100-SXM4-40GB", None, 5.0, 40960.0, 31.0, None)
    assert parse_gpu_line("No devices were found") is None


def test_history_is_bounded() -> None:
    history = GpuHistory(points=3)
    for util in range(10):
        history.add(GpuSnapshot((GpuSample(0, "g", float(util), 50, 100, 30, 60),), None, util))
    assert list(history.util[0]) == [7.0, 8.0, 9.0] and list(history.mem[0]) == [50.0] * 3


def _snap(t: float, util: float, state: str = "ok") -> GpuSnapshot:
    return GpuSnapshot((GpuSample(0, "g", util, 0, 1, 0, 0),), None, t, state)  # type: ignore[arg-type]


def test_idle_after_minutes_near_zero_and_reset_by_work() -> None:
    detector = IdleGpuDetector(idle_util_percent=5, idle_minutes=2)
    assert not detector.update(_snap(0, 1))
    assert not detector.update(_snap(60, 3))
    assert detector.update(_snap(121, 0))
    assert not detector.update(_snap(130, 80))  # work again
    assert not detector.update(_snap(400, 0))  # a new idle period starts now
    assert not detector.update(_snap(500, 0, "reconnecting"))
    assert detector.update(_snap(521, 0))
    assert not detector.update(_snap(600, 0), running=False)


def test_progress_protocol_step_rate_eta_loss_and_events() -> None:
    tracker = ProgressTracker(loss_points=3)
    for step in range(0, 50, 10):
        tracker.feed(
            json.dumps(
                {
                    "step": step,
                    "total_steps": 1000,
                    "loss": 2.0 - step / 100,
                    "samples_per_s": 512.0,
                    "time": 1000 + step / 10,
                }
            )
        )
    tracker.feed(json.dumps({"event": "checkpoint", "step": 40, "path": "ckpt/step-40.pt"}))
    tracker.feed("not json at all")
    tracker.feed(json.dumps({"event": "preempted", "time": 1010}))
    p: Progress = tracker.progress
    assert (p.step, p.total_steps, p.samples_per_s) == (40, 1000, 512.0)
    assert p.steps_per_s == pytest.approx(10.0)
    assert p.eta_seconds == pytest.approx(96.0)
    assert p.losses == pytest.approx((1.8, 1.7, 1.6)) and p.loss == pytest.approx(1.6)
    assert p.last_checkpoint is not None and p.last_checkpoint.path == "ckpt/step-40.pt"
    assert p.preemptions == 1 and p.fraction == pytest.approx(0.04)
    # Resumed from an older checkpoint: the rate restarts instead of going negative.
    tracker.feed(json.dumps({"step": 30, "time": 2000}))
    assert tracker.progress.step == 30 and tracker.progress.steps_per_s is None


async def test_follow_progress_over_ssh(get_conn: ReconnectingGetter, remote_dir: Path) -> None:
    metrics = remote_dir / "metrics.jsonl"
    metrics.write_text(
        "".join(
            json.dumps({"step": s, "total_steps": 10, "loss": 1.0 / (s + 1), "time": s}) + "\n"
            for s in range(5)
        )
    )
    progress = [
        p async for p in follow_progress(ssh(get_conn), str(metrics), follow=False) if isinstance(p, Progress)
    ]
    assert progress[-1].step == 4 and progress[-1].eta_seconds == pytest.approx(6.0)
    assert len(progress[-1].losses) == 5


FLOOD_SMI = """#!/bin/sh
case "$1" in
  --query-compute-apps=*) exit 0;;
  --query-gpu=*)
    echo "0, NVIDIA L4, 50, 1000, 23034, 40, 72.5"
    exec python3 -c '
import os, sys
blob, junk, sent = b"x" * (1 << 20), b"garbage that parses as nothing\\n" * 2000, 0
while True:
    sys.stdout.buffer.write(blob + junk)  # a megabyte without a newline, then unparsed lines
    sent += len(blob) + len(junk)
    with open(sys.argv[1], "w") as f:
        f.write(str(sent))
' "$COUNT_FILE";;
esac
"""


async def test_newline_free_output_and_unparsed_lines_keep_memory_bounded(
    get_conn: ReconnectingGetter, tmp_path: Path
) -> None:
    import asyncio
    import os

    import psutil

    count = tmp_path / "sent"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FLOOD_SMI.replace('"$COUNT_FILE"', str(count)))
    smi.chmod(0o755)
    me = psutil.Process(os.getpid())
    monitor = GpuMonitor(ssh(get_conn), nvidia_smi=str(smi), stall_timeout=2.0, retry_delay=0.1)
    first: list[GpuSnapshot] = []

    async def consume() -> None:
        async for snapshot in monitor:
            first.append(snapshot)

    task = asyncio.create_task(consume())
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        base = None
        while loop.time() < deadline:
            await asyncio.sleep(0.2)
            sent = int(count.read_text() or 0) if count.exists() else 0
            if base is None and sent > 20_000_000:
                base = me.memory_info().rss  # after start-up allocations settled
                base_sent = sent
            if base is not None and sent - base_sent > 150_000_000:
                break
        assert base is not None and sent - base_sent > 150_000_000, "the flood did not flow"
        growth = me.memory_info().rss - base
        assert growth < 60_000_000, f"RSS grew by {growth / 1e6:.0f} MB while 150 MB of junk arrived"
        assert not task.done()  # still watching, nothing died
    finally:
        task.cancel()


def test_progress_numbers_out_of_range_are_ignored_and_the_tracker_lives_on() -> None:
    tracker = ProgressTracker()
    hostile = [
        '{"step": ' + "9" * 401 + ', "total_steps": 100, "time": 1}',
        '{"step": 1, "total_steps": ' + "9" * 401 + ', "time": 2}',
        '{"step": 2, "loss": ' + "9" * 401 + ', "samples_per_s": 1e308, "time": 3}',
        '{"step": 3, "time": ' + "9" * 401 + "}",
        '{"step": -5, "time": 1e308}',
        '{"step": 1e400}',
        '{"event": "checkpoint", "step": ' + "9" * 401 + ', "time": ' + "9" * 401 + "}",
    ]
    for line in hostile:
        tracker.feed(line)  # none of them raises
    assert tracker.feed('{"step": 10, "total_steps": 100, "loss": 0.5, "time": 20}')
    assert tracker.feed('{"step": 20, "total_steps": 100, "loss": 0.4, "time": 30}')
    p = tracker.progress
    assert (p.step, p.total_steps, p.loss) == (20, 100, 0.4)
    assert p.eta_seconds is not None and p.eta_seconds >= 0


def test_a_resume_restarts_the_step_rate_so_downtime_does_not_inflate_the_eta() -> None:
    tracker = ProgressTracker()
    for step in range(0, 41, 10):  # 10 steps/s
        tracker.feed(json.dumps({"step": step, "total_steps": 1000, "time": 1000 + step / 10}))
    tracker.feed(json.dumps({"event": "preempted", "step": 40, "time": 1004.5}))
    # Down for a minute, then the job resumes from its checkpoint of step 40.
    tracker.feed(json.dumps({"event": "resumed", "step": 40, "path": "ckpt/step-40", "time": 1065}))
    assert tracker.progress.eta_seconds is None  # no rate across the downtime
    for step in range(50, 71, 10):
        tracker.feed(json.dumps({"step": step, "total_steps": 1000, "time": 1066 + (step - 50) / 10}))
    p = tracker.progress
    assert p.steps_per_s == pytest.approx(10.0)
    assert p.eta_seconds == pytest.approx(93.0)
