"""CLI helpers over sshd, and the Rich cells for GPU and progress."""

from __future__ import annotations

import io
import json
from pathlib import Path

from gcptui.remote.telemetry.gpu import GpuHistory, GpuSample, GpuSnapshot
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.cli.logs import run_gpu, run_logs
from gcptui.tui.live.cells import format_duration, gpu_cell, progress_cell, sparkline
from tests.logs.conftest import ReconnectingGetter, ssh
from tests.logs.test_gpu_metrics import FAKE_SMI


async def test_logs_of_two_names_are_merged_with_a_prefix(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text("".join(f"\x1b[32mline {n}\x1b[0m\n" for n in range(10)))
    out = io.StringIO()
    code = await run_logs({"a": ssh(get_conn), "bb": ssh(get_conn)}, [str(log)], lines=2, out=out)
    assert code == 0
    assert sorted(out.getvalue().splitlines()) == ["a  | line 8", "a  | line 9", "bb | line 8", "bb | line 9"]


async def test_logs_of_one_name_are_printed_bare(get_conn: ReconnectingGetter, remote_dir: Path) -> None:
    log = remote_dir / "output.log"
    log.write_text("x\ny\n")
    out = io.StringIO()
    assert await run_logs({"a": ssh(get_conn)}, [str(log)], lines=5, out=out, colour=True) == 0
    assert out.getvalue() == "x\ny\n"


async def test_gpu_once_json_has_the_contract_fields(get_conn: ReconnectingGetter, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    out = io.StringIO()
    code = await run_gpu(
        {"vm": ssh(get_conn), "cpu-box": ssh(get_conn)},
        json_output=True,
        once=True,
        out=out,
        nvidia_smi=str(smi),
    )
    assert code == 0
    data = json.loads(out.getvalue())
    assert [d["name"] for d in data] == ["vm", "cpu-box"]
    gpu = data[0]["gpus"][0]
    assert set(gpu) == {"index", "name", "util", "mem_used_mib", "mem_total_mib", "temp_c", "power_w"}
    out = io.StringIO()
    await run_gpu({"cpu": ssh(get_conn)}, once=True, out=out, nvidia_smi=str(tmp_path / "none"))
    assert out.getvalue().startswith("cpu  no GPU")


def test_sparkline_scales_to_the_range() -> None:
    assert sparkline([0, 50, 100], width=3) == "▁▄█"
    assert sparkline([2.0, 1.0], maximum=None) == "█▁"
    assert sparkline([], width=3) == ""


def test_gpu_cell_shows_no_gpu_idle_and_values() -> None:
    history = GpuHistory()
    assert gpu_cell(history).plain == "…"
    history.add(GpuSnapshot(state="no_gpu"))
    assert gpu_cell(history).plain == "no GPU"
    history.add(GpuSnapshot((GpuSample(0, "L4", 97, 20000, 23034, 60, 70),), None, 1.0))
    assert gpu_cell(history, width=4, idle=True).plain == " IDLE  █ 97% 87%m"


def test_progress_cell_reads_step_rate_eta_and_loss() -> None:
    progress = Progress(
        step=1200, total_steps=5000, losses=(3.0, 2.0, 1.0), loss=1.0, steps_per_s=3.14, eta_seconds=1210
    )
    assert progress_cell(progress).plain == "1200/5000  24% 3.14 it/s ETA 20m █▄▁ 1"
    assert progress_cell(None).plain == "—"
    assert format_duration(3 * 3600 + 300) == "3h05m"
