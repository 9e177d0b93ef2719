"""Fixtures for keep-alive: an emulated Spot fleet with a project, a job config and shared services."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.compute.backend import BackendContext
from gcptui.remote.compute.gce.backend import GceBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.keepalive.recovery import KeepAlive
from gcptui.remote.services import Services
from tests.helpers.emulator import emulator

__all__ = ["emulator"]

ROOT = Path(__file__).resolve().parents[2]

# A job that reports one progress line, then runs until stopped.
SLEEPER = 'printf \'{"step": 1, "total_steps": 10}\\n\' >> "$GCPTUI_METRICS"; sleep 60'
# The reference trainer, small and slowed down so a preemption lands mid-run; every step logged.
TRAIN = "python -m gcptui_trainer --run-dir runs/r --steps {steps} --size tiny --checkpoint-every 100 --log-every 1 --step-delay {delay}"


@dataclass
class Fleet:
    """An emulator with Spot VMs, the config that points at it, and services built from that config."""

    emu: Emulator
    services: Services
    config_path: Path
    project: Path

    def metrics(self, name: str) -> list[dict[str, object]]:
        """The job's metrics lines on VM ``name``, read straight from its emulated disk."""
        path = self.emu.instance(name).disk / "home" / ".gcptui" / "job" / "metrics.jsonl"  # type: ignore[operator]
        if not path.exists():
            return []
        # Complete lines only: the job may be writing the last one right now.
        lines = path.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines if line.startswith("{")]

    async def start_job(self, name: str) -> None:
        """Sync the project to VM ``name`` and start its job, as `gcptui job start` does."""
        [instance] = await self.services.resolve([name])
        session = self.services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await self.services.jobs.start(self.services.reach(instance))

    def steps(self, name: str) -> int:
        return max((r["step"] for r in self.metrics(name) if "event" not in r), default=0)  # type: ignore[type-var]


def outcome(keepalive: KeepAlive, name: str) -> str | None:
    """How ``name``'s latest recovery ended ("resumed", "failed", ...); None while none has ended."""
    timeline = keepalive.timelines.get(name)
    return None if timeline is None or timeline.outcome == "recovering" else timeline.outcome


def job_seen_running(keepalive: KeepAlive, name: str) -> bool:
    """Keep-alive saw ``name``'s job run (its notice watcher on the row's first machine)."""
    seen = keepalive.job_seen(name)
    return seen is not None and seen.state == "running"


def gce_backend(emu: Emulator, folder: Path, fleet: type[FleetSource] = FleetSource) -> GceBackend:
    """The GCE backend over the emulator, as ``Services`` builds it (``fleet``: the ``FleetSource`` class)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = load_config(str(emu.write_config(folder / "gcptui.toml")))
    return GceBackend(BackendContext(config), fleet(config))


def write_project(root: Path) -> Path:
    project = root / "project"
    project.mkdir(parents=True)
    (project / "README.md").write_text("keep-alive test project\n")
    return project


async def make_fleet(emu: Emulator, tmp_path: Path, names: list[str], *, command: str, resume: str = "",
                     setup: str = "", termination_action: str | None = None,
                     metadata: dict[str, str] | None = None, known_hosts: Path | None = None,
                     spot: bool = True, gpus: list[tuple[str, int]] | None = None,
                     extra_config: str = "") -> Fleet:  # fmt: skip
    """``known_hosts``: a file of the test's own instead of the emulator's (which lists every VM)."""
    for name in names:
        emu.add_instance(
            name, spot=spot, termination_action=termination_action, metadata=metadata, gpus=gpus or []
        )
    await wait_until_running(emu, names)
    project = write_project(tmp_path)
    path = emu.write_config(tmp_path / "gcptui.toml")
    q = json.dumps
    if known_hosts is not None:
        text = path.read_text().replace(
            f"known_hosts = {q(str(emu.known_hosts))}", f"known_hosts = {q(str(known_hosts))}"
        )
        path.write_text(text)
    with path.open("a") as config:
        config.write(
            f'\n[sync]\nsource = {q(str(project))}\ndest = "~/project"\nprotect = ["runs/"]\n'
            f"\n[job]\ncommand = {q(command)}\nresume = {q(resume)}\nsetup = {q(setup)}\nstop_grace_seconds = 2\n"
            + extra_config
        )
    return Fleet(emu, Services(load_config(str(path))), path, project)


@pytest.fixture
async def fleet_factory(emulator: Emulator, tmp_path: Path) -> AsyncIterator[object]:
    made: list[Fleet] = []

    async def make(names: list[str], **options: object) -> Fleet:
        fleet = await make_fleet(emulator, tmp_path, names, **options)  # type: ignore[arg-type]
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        await fleet.services.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "keepalive(**options): KeepAlive settings for the watch fixture")
