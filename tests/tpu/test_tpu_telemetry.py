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
from gcptui.remote.telemetry.gpu import GpuMonitor
from gcptui.remote.telemetry.tpu_info import parse_tpu_info

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
