"""A sweep's VMs as ``vms = { count = N, from = BASE }``: made like the base by ``sweep run`` (vm
create --from's code), the trials spread over them, deleted at the end; and the file's checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.spec import VmsFrom, parse_sweep
from tests.sweep.test_sweep_emulator import ROOT, setup_fleet

FROM_SWEEP = """
name = "made"
command = "mkdir -p {run_dir} && printf '{{\\"step\\": 1, \\"score\\": %s}}\\\\n' {x} >> {run_dir}/metrics.jsonl"
metric = "score"
goal = "max"
search = "grid"
vms = { count = 2, from = "base-0", prefix = "fx" }
trials_per_vm = 1
at_end = "delete"
poll_seconds = 0.2
keepalive = false

[params.x]
kind = "list"
values = [1, 2, 3, 4]
"""


def test_count_and_from_name_the_vms_and_bad_ones_are_one_line() -> None:
    spec = parse_sweep(FROM_SWEEP, Path("s.toml"))
    assert isinstance(spec.vms, VmsFrom) and spec.vms.base == "base-0"
    assert spec.vm_names == ["fx-1", "fx-2"]
    unnamed = parse_sweep(
        FROM_SWEEP.replace(', prefix = "fx"', "").replace('"made"', '"LR_sweep.2"'), Path("s.toml")
    )
    assert unnamed.vm_names == ["lr-sweep-2-1", "lr-sweep-2-2"]
    # The state keeps the spec as JSON: it reads back the same.
    assert type(spec).model_validate(spec.model_dump(mode="json")) == spec
    with pytest.raises(ConfigError, match=r"s\.toml.*vms\.count.*greater than or equal to 1"):
        parse_sweep(FROM_SWEEP.replace("count = 2", "count = 0"), Path("s.toml"))
    with pytest.raises(ConfigError, match="not a valid VM name"):
        parse_sweep(FROM_SWEEP.replace('prefix = "fx"', 'prefix = "Fx_"'), Path("s.toml"))
    with pytest.raises(ConfigError, match="TYPE:COUNT"):
        parse_sweep(FROM_SWEEP.replace('prefix = "fx"', 'gpus = "l4"'), Path("s.toml"))


def test_sweep_run_creates_the_vms_from_the_base_and_deletes_them_at_the_end(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    emu.add_instance("base-0", machine_type="n1-standard-8", labels={"team": "vision"})
    emu.wait_for_status("base-0", "RUNNING")
    config, sweep, env = setup_fleet(emu, tmp_path, [], FROM_SWEEP)
    done = subprocess.run([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "creating fx-1, fx-2 like base-0" in done.stderr
    final = json.loads((tmp_path / "sweeps" / "made" / "state.json").read_text())
    assert [t["state"] for t in final["trials"]] == ["finished"] * 4, done.stderr
    assert {t["vm"] for t in final["trials"]} == {"fx-1", "fx-2"}
    assert [t["metric"] for t in final["trials"]] == [1.0, 2.0, 3.0, 4.0]
    # Deleted once their last trial ended; the base is left alone.
    for name in ("fx-1", "fx-2"):
        emu.wait_for_status(name, None)
    assert sorted(final["vms_done"]) == ["fx-1", "fx-2"]
    assert emu.instance("base-0").status == "RUNNING"
