"""TPU chips in the GPU column: ``tpu-info``'s tables read into samples, on a real worker over SSH."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gcptui.remote.compute.tpu.backend import TpuBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.services import Services
from gcptui.remote.telemetry.gpu import GpuMonitor, GpuSample, GpuSnapshot
from gcptui.remote.telemetry.tpu_info import parse_tpu_info
from gcptui.tui.cli.logs import snapshot_lines
from gcptui.tui.live.state import Live

# As tpu-info 0.5 prints it (its README), global chip ids in the utilization table.
PIPES = """\
TPU Chips

| Chip         | Type         | Devices | PID    |
|--------------|--------------|---------|--------|
| /dev/vfio/0  | TPU v6e chip | 1       | 1022   |
| /dev/vfio/1  | TPU v6e chip | 1       | 1022   |

TPU Runtime Utilization

| Chip   | HBM Usage (GiB)          | Duty cycle |
|--------|--------------------------|------------|
| 8      | 17.26 GiB / 31.25 GiB    |    100.00% |
| 9      |  9.26 GiB / 31.25 GiB    |     42.50% |
"""
# Older versions draw the same tables with rich's box characters.
BOXES = """\
TPU Chips
┏━━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━┓
┃ Chip        ┃ Type        ┃ Devices ┃ PID  ┃
┡━━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━┩
│ /dev/accel0 │ TPU v4 chip │ 1       │ 130  │
└─────────────┴─────────────┴─────────┴──────┘
TPU Runtime Utilization
┏━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┓
┃ Chip ┃ Memory usage         ┃ Duty cycle ┃
┡━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━┩
│ 0    │ 0.00 GiB / 31.75 GiB │      0.00% │
└──────┴──────────────────────┴────────────┘
"""


# tpu-info 0.14 into a pipe (its README's static mode): the libtpu version and accelerator type first,
# more tables after the utilization (TensorCore, latencies), which are not chips.
STATIC_0_14 = """\
Libtpu version: 0.0.19.dev20250721+nightly
Accelerator type: v6e

TPU Chips

| Chip        | Type         | Devices | PID     |
|-------------|--------------|---------|---------|
| /dev/vfio/0 | TPU v6e chip | 1       | 1469584 |
| /dev/vfio/1 | TPU v6e chip | 1       | 1469584 |

TPU Runtime Utilization

| Chip | HBM Usage (GiB)       | Duty cycle |
|------|-----------------------|------------|
| 0    | 18.45 GiB / 31.25 GiB |    100.00% |
| 1    | 10.40 GiB / 31.25 GiB |     37.50% |

TensorCore Utilization

| Core ID | TensorCore Utilization |
|---------|------------------------|
| 0       | 13.60%                 |
| 1       | 14.81%                 |

TPU gRPC TCP Minimum RTT

| P50      | P90      | P95      | P999     |
|----------|----------|----------|----------|
| 35.99 us | 52.15 us | 53.83 us | 55.51 us |
"""
# The moments around a job's start (and any time no framework holds the chips): the chips' owner is
# already the job's, but libtpu serves no metrics yet; tpu-info prints its warning panel and N/A in
# every cell of the utilization table (cli_helper.py's TpuRuntimeUtilizationTable).
STARTING = """\
Libtpu version: 0.0.19
Accelerator type: v4

TPU Chips

| Chip        | Type        | Devices | PID  |
|-------------|-------------|---------|------|
| /dev/accel0 | TPU v4 chip | 1       | 4242 |
| /dev/accel1 | TPU v4 chip | 1       | 4242 |

╭──────────────────── Runtime Utilization Status ────────────────────╮
│ WARNING: Libtpu metrics unavailable. Is there a framework using    │
│ the TPU? See tpu_info docs for more information.                   │
╰────────────────────────────────────────────────────────────────────╯
TPU Runtime Utilization

| Chip | HBM Usage (GiB) | Duty cycle |
|------|-----------------|------------|
| 0    | N/A             | N/A        |
| 1    | N/A             | N/A        |
"""
# Two devices per chip (v2, v3): a utilization row per device, the duty cycle on even devices only.
TWO_DEVICES = """\
TPU Chips

| Chip        | Type        | Devices | PID  |
|-------------|-------------|---------|------|
| /dev/accel0 | TPU v3 chip | 2       | 77   |
| /dev/accel1 | TPU v3 chip | 2       | 77   |

TPU Runtime Utilization

| Chip | HBM Usage (GiB)     | Duty cycle |
|------|---------------------|------------|
| 0    | 3.00 GiB / 8.00 GiB |     80.00% |
| 1    | 1.00 GiB / 8.00 GiB |            |
| 2    | 2.00 GiB / 8.00 GiB |     60.00% |
| 3    | 2.00 GiB / 8.00 GiB |            |
"""


def test_tpu_info_as_it_prints_now_around_a_job_start_and_per_device() -> None:
    assert [(c.index, c.name, c.util, c.mem_used_mib) for c in parse_tpu_info(STATIC_0_14)] == [
        (0, "TPU v6e", 100.0, 18.45 * 1024),
        (1, "TPU v6e", 37.5, 10.40 * 1024),
    ]
    assert [(c.index, c.name, c.util, c.mem_used_mib) for c in parse_tpu_info(STARTING)] == [
        (0, "TPU v4", None, None),
        (1, "TPU v4", None, None),
    ]
    assert [(c.index, c.util, c.mem_used_mib, c.mem_total_mib) for c in parse_tpu_info(TWO_DEVICES)] == [
        (0, 80.0, 4.0 * 1024, 16.0 * 1024),
        (1, 60.0, 4.0 * 1024, 16.0 * 1024),
    ]
    seven = STATIC_0_14.replace("TPU v6e chip", "TPU7x chip")
    assert {c.name for c in parse_tpu_info(seven)} == {"TPU7x"}


def test_the_cli_and_the_table_show_the_same_figure_for_tpu_chips() -> None:
    for text, util in ((STATIC_0_14, "100%"), (STARTING, "?")):
        chip = parse_tpu_info(text)[0]  # one chip: the table's cell is the mean over a machine's chips
        snapshot = GpuSnapshot(
            gpus=(
                GpuSample(
                    chip.index, chip.name, chip.util, chip.mem_used_mib, chip.mem_total_mib, None, None
                ),
            )
        )
        lines = snapshot_lines("tpu-a/w0", snapshot)
        assert lines[0].startswith("tpu-a/w0  tpu0  TPU v") and not lines[0].endswith("?W"), lines
        live = Live(watched=True)
        live.gpu.add(snapshot)
        cell = live.gpu_text(narrow=True).plain
        assert f"util {util:>4}" in lines[0] and cell == util, (lines[0], cell)


def test_both_table_styles_give_one_sample_per_chip() -> None:
    first, second = parse_tpu_info(PIPES)
    assert (first.index, first.name, first.util, first.mem_used_mib) == (0, "TPU v6e", 100.0, 17.26 * 1024)
    assert (second.index, second.util, second.mem_total_mib) == (1, 42.5, 31.25 * 1024)
    (only,) = parse_tpu_info(BOXES)
    assert (only.name, only.util, only.mem_used_mib, only.mem_total_mib) == ("TPU v4", 0.0, 0.0, 31.75 * 1024)


def test_chips_without_a_workload_have_no_metrics_and_nonsense_is_skipped() -> None:
    idle = PIPES.split("TPU Runtime Utilization")[0]
    assert [(s.index, s.util, s.mem_used_mib) for s in parse_tpu_info(idle)] == [
        (0, None, None),
        (1, None, None),
    ]
    hostile = (
        idle
        + "TPU Runtime Utilization\n| 0 | 9"
        + "9" * 400
        + " GiB / 1 GiB | 250% |\n| 99999 | 1 GiB / 2 GiB | 5% |\n"
    )
    assert [(s.index, s.util, s.mem_used_mib) for s in parse_tpu_info(hostile)] == [
        (0, None, None),
        (1, None, None),
    ]


@given(
    st.text(
        alphabet=st.sampled_from(list("|│┃ 0123456789.%GiB/\nTPU Chipsv4chRuntimeUtilzao-")), max_size=2000
    )
)
def test_any_output_parses_to_bounded_samples(text: str) -> None:
    samples = parse_tpu_info(text)
    assert len(samples) <= 64
    assert all(s.util is None or 0 <= s.util <= 100 for s in samples)


async def test_the_gpu_monitor_reads_a_tpu_workers_chips(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_tpu("tpu-a", accelerator_type="v4-8")
    await emulator.wait_for_tpu("tpu-a", "READY")
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        backend = services.compute.backends["tpu"]
        assert isinstance(backend, TpuBackend)
        (row,) = (await asyncio.to_thread(backend.list_rows)).rows
        (worker,) = backend.worker_rows(row)
        snapshots = GpuMonitor(services.channel(worker)).snapshots()
        idle = await anext(snapshots)
        assert idle.state == "ok" and [(g.name, g.util) for g in idle.gpus] == [("TPU v4", None)] * 4
        # A job runs (the supervisor's state file says so): libtpu's metrics appear.
        disk = emulator.tpu("tpu-a").workers[0].disk
        assert disk is not None
        state = disk / "home" / ".gcptui" / "job" / "state"
        state.parent.mkdir(parents=True)
        state.write_text("running\n")
        busy = await anext(snapshots)
        while busy.gpus[0].util is None:
            busy = await anext(snapshots)
        assert all(g.util is not None and g.util >= 90 and g.mem_total_mib == 31.25 * 1024 for g in busy.gpus)
        await snapshots.aclose()
    finally:
        await services.close()
