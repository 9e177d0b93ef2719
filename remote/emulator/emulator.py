"""The emulator's Python API: a local stand-in for GCE behind the real client library.

emulator = Emulator(tmp_path, boot_seconds=0.2)
await emulator.start()
emulator.add_instance("trainer-1", "us-central1-a", gpus=[("nvidia-l4", 1)], spot=True)
emulator.write_config(tmp_path / "gcptui.toml")
...
await emulator.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from gcptui.remote.emulator.emulator_assembly import DEFAULT_ZONES, GpuSpec, free_port
from gcptui.remote.emulator.emulator_faults import EmulatorFaults
from gcptui.remote.emulator.emulator_machines import EmulatorMachines

# Importable from here, where callers (tests, benchmarks, the demo) have always found them.
__all__ = ["DEFAULT_ZONES", "Emulator", "GpuSpec", "free_port", "wait_until_running"]


class Emulator(EmulatorMachines, EmulatorFaults):
    """A local Compute API for one project, with optional SSH-reachable VMs.

    Its parts: assembly, files and config (emulator_assembly.py), machines (emulator_machines.py),
    faults (emulator_faults.py).
    """

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def wait_until_running(emulator: Emulator, names: Iterable[str], timeout: float = 30.0) -> None:
    """Until every named VM reads RUNNING."""
    await asyncio.gather(*(emulator.wait_for_status(n, "RUNNING", timeout) for n in names))
