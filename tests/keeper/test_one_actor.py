"""One actor per recovery, on the emulator and fake-gcs-server: the laptop's keep-alive and a keeper's
both watch one Spot VM; every start of the job is counted on the VM.

The job is a shell loop that keeps its step in a file and says ``resumed`` from it, not the reference
trainer: what these tests count is starts, and a trainer's torch import would cost each of the ten
preemptions seconds (``test_deploy.py`` proves 0 steps lost with the real trainer)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.keepalive.lease import Lease, LeaseView
from gcptui.remote.keepalive.service import KeepAliveService, build_service
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import Fleet
from tests.keeper.starve import starve_at_the_fence

TTL = 2.0
FAST = {"poll_seconds": 0.3, "backoff_base": 0.2, "warm_after_seconds": 0.0}
STARTS = "$HOME/job-starts"  # one line per start of the job on the VM, whoever started it
PREEMPTIONS = 10  # the acceptance: ten in a row, each relaunched exactly once
# A step every 20 ms, kept in ~/step across restarts (renamed into place: a SIGTERM between the
# truncation and the write of `>` read 0 at the next start); SIGTERM ends it (143) as a trainer's would.
LOOP = (
    'while :; do i=$((i+1)); echo $i > $HOME/step.new; mv $HOME/step.new $HOME/step; printf \'{"step": %d}\\n\' $i >> "$GCPTUI_METRICS"; '
    "sleep 0.02; done"
)
COMMAND = f"echo start >> {STARTS}; i=0; {LOOP}"
RESUME = (f"echo start >> {STARTS}; i=$(cat $HOME/step 2>/dev/null || echo 0); "
          f'printf \'{{"event": "resumed", "step": %d}}\\n\' $i >> "$GCPTUI_METRICS"; {LOOP}')  # fmt: skip


@dataclass
class Side:
    service: KeepAliveService
    task: asyncio.Task[None]
    services: Services

    @property
    def holding(self) -> bool:
        return self.service.gate is not None and self.service.gate.holding

    async def stop(self, *, release: bool = True) -> None:
        """``release=False``: the keeper's VM lost power; nothing gives its lease back."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if not release:
            self.service.gate = None
        await self.service.close()
        await self.services.close()


@pytest.fixture
async def trained(fleet_factory, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch) -> AsyncIterator[Fleet]:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))  # the lease key, and the job ledger
    fake_gcs.make_bucket("runs")
    fleet = await fleet_factory(
        ["spot-k"], command=COMMAND, resume=RESUME,
        extra_config=f'env = {{ STORAGE_EMULATOR_HOST = "{fake_gcs.host}" }}\n\n[storage]\nbucket = "gs://runs/t"\n',
    )  # fmt: skip
    fleet.emu.timing.preempt_grace_seconds = 0.2  # the shell loop stops at once on SIGTERM
    fleet.emu.timing.boot_seconds = fleet.emu.timing.stop_seconds = 0.1
    await fleet.start_job("spot-k")
    yield fleet


def starts(fleet: Fleet) -> int:
    path = fleet.emu.instance("spot-k").disk / "home" / "job-starts"  # type: ignore[operator]
    return len(path.read_text().split()) if path.exists() else 0


def start_side(fleet: Fleet, role: str, events: list[str] | None = None) -> Side:
    services = Services(load_config(str(fleet.config_path)))  # each actor its own process's services
    service = build_service(
        services, names=["spot-k"], notices=False, autostop=False, lease=role,  # type: ignore[arg-type]
        lease_ttl=TTL, keeper_name="test-keeper", tuning=FAST,
        on_event=(lambda e: events.append(e.line())) if events is not None else None,
    )  # fmt: skip
    return Side(service, asyncio.create_task(service.run()), services)


def told(*sides: Side) -> str:
    """Each side's timeline of spot-k and its lease standing, for a failure's message."""
    lines = []
    for side in sides:
        gate = side.service.gate
        lines.append(f"-- {gate.describe() if gate is not None else 'no lease'}")
        for timeline in side.service.keepalive.history.get("spot-k", []):
            lines += [e.line() for e in timeline.events]
    return "\n".join(lines)


async def preempt_and_resume(fleet: Fleet, expected_starts: int) -> None:
    before = fleet.steps("spot-k")
    await eventually(lambda: fleet.steps("spot-k") > before + 5, timeout=30)
    fleet.emu.preempt("spot-k")
    await fleet.emu.wait_for_status("spot-k", "TERMINATED", timeout=20)
    await eventually(lambda: starts(fleet) >= expected_starts, timeout=40)
    await eventually(
        lambda: fleet.steps("spot-k") > 0 and fleet.emu.instance("spot-k").status == "RUNNING", timeout=20
    )


async def test_laptop_and_keeper_both_watching_relaunch_each_preemption_once(trained: Fleet) -> None:
    laptop_events: list[str] = []
    keeper = start_side(trained, "keeper")
    await eventually(lambda: keeper.holding, timeout=20)
    laptop = start_side(trained, "laptop", laptop_events)
    try:
        await eventually(lambda: laptop.service.gate and laptop.service.gate.keeper_live, timeout=20)
        for n in range(PREEMPTIONS):
            try:
                await preempt_and_resume(trained, expected_starts=n + 2)
            except AssertionError as err:
                raise AssertionError(f"preemption {n + 1}: {err}\n{told(keeper, laptop)}") from None
            assert starts(trained) == n + 2, f"preemption {n + 1}: {starts(trained) - n - 1} starts"
        await eventually(lambda: laptop.service.keepalive.timelines.get("spot-k")
                         and laptop.service.keepalive.timelines["spot-k"].outcome == "resumed", timeout=20)  # fmt: skip
        await asyncio.sleep(2 * TTL)  # nothing late: a second relaunch would land within the ttl
        assert starts(trained) == PREEMPTIONS + 1
        # The laptop never acted, yet its timeline (the TUI's) shows the keeper's recovery.
        assert laptop_events and all("keeper" in line for line in laptop_events), laptop_events
        assert laptop.service.gate is not None and laptop.service.gate.describe() == "keeper holds the lease"
        assert len(laptop.service.keepalive.history["spot-k"]) == PREEMPTIONS
    finally:
        await laptop.stop()
        await keeper.stop()


async def test_a_stopped_keeper_is_taken_over_and_a_restarted_one_takes_the_lease_back(
    trained: Fleet,
) -> None:
    keeper = start_side(trained, "keeper")
    await eventually(lambda: keeper.holding, timeout=20)
    laptop = start_side(trained, "laptop")
    try:
        await eventually(lambda: laptop.service.gate and laptop.service.gate.keeper_live, timeout=20)
        await keeper.stop(release=False)  # its VM stopped: the lease is left behind, unreleased
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        await eventually(lambda: laptop.holding, timeout=TTL + 5)
        assert loop.time() - stopped_at < TTL + 3
        await preempt_and_resume(trained, expected_starts=2)
        keeper = start_side(trained, "keeper")  # a new keeper process: it waits for the laptop to give way
        await eventually(lambda: keeper.holding, timeout=TTL + 10)
        assert not laptop.holding
        await preempt_and_resume(trained, expected_starts=3)
        await asyncio.sleep(2 * TTL)
        assert starts(trained) == 3
    finally:
        await laptop.stop()
        await keeper.stop()


async def test_a_write_delayed_past_the_other_sides_read_still_ends_in_one_relaunch(
    trained: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile timing: one laptop's claim is held back until the other's read and write are done."""
    other_wrote = threading.Event()
    claim = Lease.claim

    def slow_claim(self: Lease, view: LeaseView, recovering: Iterable[str] = ()) -> bool:
        if self.holder.endswith(":slow"):
            other_wrote.wait(timeout=20)  # in the gate's worker thread: the other side goes first
            return claim(self, view, recovering)
        won = claim(self, view, recovering)
        if won:
            other_wrote.set()
        return won

    monkeypatch.setattr(Lease, "claim", slow_claim)
    fast = start_side(trained, "laptop")
    slow = start_side(trained, "laptop")
    assert slow.service.gate is not None
    slow.service.gate.lease.holder += ":slow"
    try:
        await eventually(
            lambda: fast.holding and slow.service.gate and slow.service.gate.polls >= 2, timeout=20
        )
        assert not slow.holding
        await preempt_and_resume(trained, expected_starts=2)
        await asyncio.sleep(2 * TTL)
        assert starts(trained) == 2
    finally:
        await fast.stop()
        await slow.stop()


async def test_a_keeper_starved_mid_recovery_is_taken_over_and_the_laptop_finishes_its_recovery(
    trained: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper restarts the preempted VM, then stalls before its relaunch (its VM starved): no
    renewal, no status. The laptop takes the lapsed lease, and the keeper's fence then stops its
    relaunch. The VM runs, so no poll sees a stop: the lease's list of recoveries in flight is what
    tells the laptop to finish this one. The job starts once more, from its step."""
    keeper = start_side(trained, "keeper")
    await eventually(lambda: keeper.holding, timeout=20)
    laptop = start_side(trained, "laptop")
    assert keeper.service.gate is not None
    starved = starve_at_the_fence(monkeypatch, keeper.service.gate)
    stalled, taken = starved.stalled, starved.taken
    try:
        await eventually(lambda: laptop.service.gate and laptop.service.gate.keeper_live, timeout=20)
        before = trained.steps("spot-k")
        await eventually(lambda: trained.steps("spot-k") > before + 5, timeout=30)
        trained.emu.preempt("spot-k")
        await eventually(lambda: stalled.is_set(), timeout=40)
        assert trained.emu.instance("spot-k").status == "RUNNING"  # the keeper's restart, no relaunch yet
        await eventually(lambda: laptop.holding, timeout=TTL + 10)
        taken.set()
        try:
            await eventually(lambda: starts(trained) >= 2, timeout=40)
            await eventually(lambda: trained.steps("spot-k") > 0, timeout=20)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{told(keeper, laptop)}") from None
        await eventually(lambda: any("lease passed" in line for line in _lines(keeper)), timeout=20)
        await asyncio.sleep(2 * TTL)  # nothing late: the keeper's stopped relaunch stays stopped
        assert starts(trained) == 2, told(keeper, laptop)
        assert any("mid-recovery" in line for line in _lines(laptop)), told(keeper, laptop)
    finally:
        taken.set()
        await laptop.stop()
        await keeper.stop()


def _lines(side: Side) -> list[str]:
    return [e.line() for t in side.service.keepalive.history.get("spot-k", []) for e in t.events]
