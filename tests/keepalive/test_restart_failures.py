"""Detection and restart on the emulator, with a stand-in relaunch (SSH and jobs are tested end to end
elsewhere): user stops, stock-outs, SSH not up yet, max_restarts, the VM's own notice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent, StepReporter
from gcptui.remote.models import Instance
from gcptui.remote.ssh.errors import SshUnreachableError
from tests.helpers.emulator import eventually, gce_for
from tests.keepalive.conftest import gce_backend


@dataclass
class Relaunches:
    """Records relaunches; the first ``fail`` attempts fail as SSH that is not up yet."""

    fail: int = 0
    calls: list[Instance] = field(default_factory=list)

    async def __call__(self, instance: Instance, report: StepReporter) -> int:
        self.calls.append(instance)
        if len(self.calls) <= self.fail:
            raise SshUnreachableError(instance.name, f"{instance.name}: connection refused")
        report("started", "stand-in job")
        return 42


@dataclass
class Watch:
    emu: Emulator
    keepalive: KeepAlive
    relaunches: Relaunches
    events: list[RecoveryEvent]

    def kinds(self, name: str = "spot-a") -> list[str]:
        return [e.kind for e in self.events if e.name == name]

    async def settled(self, nth: int = 1, name: str = "spot-a", timeout: float = 30) -> str:
        """Until the ``nth`` recovery of ``name`` ended; returns its outcome."""
        keepalive = self.keepalive

        def ended() -> bool:
            history = keepalive.history.get(name, [])
            return (
                len(history) >= nth
                and history[nth - 1].outcome != "recovering"
                and not keepalive.recovering(name)
            )

        await eventually(ended, timeout)
        return keepalive.history[name][nth - 1].outcome

    async def polls(self, count: int) -> None:
        """Until ``count`` more polls happened."""
        target = self.keepalive.polls + count
        await eventually(lambda: self.keepalive.polls >= target, 30)


@pytest.fixture
async def watch(emulator: Emulator, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Watch]:
    """``spot-a`` and ``spot-b`` running, keep-alive polling every 0.3 s (options: the test's marker)."""
    marker = request.node.get_closest_marker("keepalive")
    options = dict(marker.kwargs) if marker else {}
    fail = int(options.pop("fail", 0))
    for name in ("spot-a", "spot-b"):
        emulator.add_instance(name, spot=True)
    await wait_until_running(emulator, ["spot-a", "spot-b"])
    events: list[RecoveryEvent] = []
    relaunches = Relaunches(fail=fail)
    settings = {"poll_seconds": 0.3, "backoff_base": 0.2, **options}
    backend = gce_backend(emulator, tmp_path / "config")
    keepalive = KeepAlive(backend, relaunch=relaunches, on_event=events.append, **settings)  # type: ignore[arg-type]
    runner = asyncio.create_task(keepalive.run())
    await eventually(lambda: keepalive.polls >= 1)
    try:
        yield Watch(emulator, keepalive, relaunches, events)
    finally:
        runner.cancel()
        await keepalive.close()


async def test_user_stop_is_not_a_preemption(watch: Watch) -> None:
    watch.emu.preempt("spot-a")
    assert await watch.settled() == "resumed"
    first = watch.keepalive.timelines["spot-a"]
    # The user's own stop after that preemption: older preemption operations must not count.
    gce = gce_for(watch.emu)
    await asyncio.to_thread(gce.stop, "spot-b", "us-central1-a")
    await asyncio.to_thread(gce.stop, "spot-a", "us-central1-a")
    await watch.polls(4)
    assert watch.emu.instance("spot-a").status == "TERMINATED"
    assert watch.emu.instance("spot-b").status == "TERMINATED"
    assert watch.keepalive.timelines["spot-a"] is first and "spot-b" not in watch.keepalive.timelines
    assert len(watch.relaunches.calls) == 1


@pytest.mark.keepalive(backoff_base=0.3)
async def test_stockouts_are_retried_with_backoff(watch: Watch) -> None:
    watch.emu.stock_out(starts=2)
    watch.emu.preempt("spot-a")
    assert await watch.settled() == "resumed"
    timeline = watch.keepalive.timelines["spot-a"]
    assert watch.kinds().count("stockout") == 2 and timeline.restarts == 3
    starts = [e.at for e in timeline.events if e.kind == "restarting"]
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6  # doubling
    assert watch.emu.instance("spot-a").status == "RUNNING"


@pytest.mark.keepalive(fail=2)
async def test_ssh_not_up_yet_is_retried(watch: Watch) -> None:
    watch.emu.preempt("spot-a")
    assert await watch.settled() == "resumed"
    assert watch.kinds().count("retry") == 2 and len(watch.relaunches.calls) == 3
    timeline = watch.keepalive.timelines["spot-a"]
    assert timeline.resumed_step == 42
    # Relaunched on the NEW address the restarted VM got.
    assert watch.relaunches.calls[-1].external_ip == watch.emu.address("spot-a")


@pytest.mark.keepalive(max_restarts=1)
async def test_max_restarts_is_honoured_until_relaunch_now(watch: Watch) -> None:
    watch.emu.preempt("spot-a")
    assert await watch.settled() == "resumed"
    watch.emu.preempt("spot-a")
    assert await watch.settled(2) == "gave_up"
    await watch.polls(4)
    assert watch.kinds().count("gave_up") == 1  # said once, not at every poll
    assert watch.emu.instance("spot-a").status == "TERMINATED" and len(watch.relaunches.calls) == 1
    # The user's relaunch-now key overrides the limit.
    assert watch.keepalive.relaunch_now("spot-a")
    assert await watch.settled(3) == "resumed"
    assert watch.kinds()[-1] == "resumed" and watch.emu.instance("spot-a").status == "RUNNING"


async def test_disabled_vm_is_left_alone(watch: Watch) -> None:
    watch.keepalive.disable("spot-a")
    watch.emu.preempt("spot-a")
    await watch.emu.wait_for_status("spot-a", "TERMINATED")
    await watch.polls(3)
    assert not watch.kinds() and not watch.keepalive.enabled("spot-a")
    watch.keepalive.enable("spot-a")
    assert await watch.settled(timeout=10) == "resumed"


@pytest.mark.keepalive(poll_seconds=60)
async def test_notice_polls_fast_until_gce_reports_the_stop(watch: Watch) -> None:
    # What the VM-side watcher does when the metadata server says preempted: notice() at once.
    watch.emu.preempt("spot-a")
    watch.keepalive.notice("spot-a")
    assert await watch.settled(timeout=20) == "resumed"  # long before the 60 s poll
    timeline = watch.keepalive.timelines["spot-a"]
    assert timeline.detected_by == "notice" and watch.kinds()[:2] == ["notice", "preempted"]
    assert timeline.preempted_at == timeline.detected_at
