"""A key and its command act alike through the same use cases (``remote/actions.py``; that both faces
call them is ``tests/unit/test_one_use_case_layer.py``): the TUI's ``X`` stops a VM and an on-demand
TPU node and ``gcptui vm start`` brings each back; the TUI's ``s`` starts the job on every worker of
the node and ``gcptui job kill`` ends it there."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.main import main
from tests.helpers.emulator import eventually
from tests.tui.test_fleet_jobs import until

JOB = '\n[job]\ncommand = "sleep 600"\n'


async def test_the_tui_keys_and_the_cli_commands_act_alike_on_a_vm_and_a_tpu_node(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_instance("vm-a", spot=False)
    emulator.add_tpu("tpu-d", accelerator_type="v4-8")  # on-demand: it can stop and start
    await wait_until_running(emulator, ["vm-a"])
    await emulator.wait_for_tpu("tpu-d", "READY")
    source = tmp_path / "src"
    source.mkdir()
    config = emulator.write_config(tmp_path / "gcptui.toml", sync_source=source)
    config.write_text(config.read_text() + JOB)
    stopped = {"vm-a": lambda: emulator.instance("vm-a").status == "TERMINATED",
               "tpu-d": lambda: emulator.tpu("tpu-d").state == "STOPPED"}  # fmt: skip
    running = {"vm-a": lambda: emulator.instance("vm-a").status == "RUNNING",
               "tpu-d": lambda: emulator.tpu("tpu-d").state == "READY"}  # fmt: skip
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:

        def listed() -> bool:
            found = app.fleet_screen.snapshot
            return found is not None and all(found.find(n) for n in ("vm-a", "tpu-d"))

        await until(pilot, listed)
        snapshot = app.fleet_screen.snapshot
        assert snapshot is not None
        # The job on the node's workers: the TUI's `s`, then the CLI's `job kill`.
        node = snapshot.find("tpu-d")
        assert node is not None
        said = await app.job_action("start", node)
        assert said == "tpu-d: job running on 1 workers", said
        assert await asyncio.to_thread(main, ["job", "kill", "tpu-d", "--config", str(config)]) == 0
        workers = await app.services.machines(["tpu-d"], running=True)
        states = [(await app.services.jobs.status(app.services.reach(w))).state for w in workers]
        assert states == ["killed"], states
        # The machine: the TUI's `X`, then the CLI's `vm start`.
        for name in ("vm-a", "tpu-d"):
            row = snapshot.find(name)
            assert row is not None
            assert await app.vm_action("stop", row) == f"{name}: stop done"
            await eventually(stopped[name], timeout=30)
            assert await asyncio.to_thread(main, ["vm", "start", name, "--config", str(config)]) == 0
            await eventually(running[name], timeout=30)
