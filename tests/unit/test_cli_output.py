"""Output for scripts: plain tab-separated rows when piped, ISO 8601 UTC times in every --json."""

from __future__ import annotations

import io
from datetime import datetime

from rich.text import Text

from gcptui.remote.telemetry.gpu import GpuSnapshot
from gcptui.tui.cli.logs import snapshot_json
from gcptui.tui.cli.tables import print_table


def test_piped_table_is_one_plain_line_per_row_never_wrapped() -> None:
    out = io.StringIO()
    command = "python -m gcptui_trainer --run-dir runs/a-very-long-run-directory-name " * 4
    print_table(["Name", "State", "Command"], [["vm-1", Text("running", "bold green"), command]], out=out)
    lines = out.getvalue().splitlines()
    assert lines == ["Name\tState\tCommand", f"vm-1\trunning\t{command}"]


def test_gpu_json_time_is_iso_utc_like_job_status() -> None:
    record = snapshot_json("vm", GpuSnapshot(time=1_700_000_000.5, state="ok"))
    assert record["time"] == "2023-11-14T22:13:20.500000+00:00"
    assert datetime.fromisoformat(str(record["time"])).utcoffset() is not None
    assert snapshot_json("vm", GpuSnapshot())["time"] is None
