"""Fan-out to many machines as a tree: past 1 + fan machines, machines the seed serves relay to
machines of their own (a file flows down as soon as it lands at each level); every tree identical."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.services import Services
from gcptui.remote.sync.fanout import relay_parents
from tests.sync.test_fanout import tree
from tests.sync.trees import snapshot


def test_each_machine_serves_at_most_fan_others() -> None:
    assert relay_parents(5, fan=2) == [None, 0, 0, 1, 1]
    parents = relay_parents(64, fan=8)
    assert parents[:10] == [None, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert max(parents.count(i) for i in range(64)) == 8 and parents[63] == 7  # two levels below the seed


async def test_machines_below_the_first_level_fetch_from_their_relay(
    emulator: Emulator, tmp_path: Path
) -> None:
    names = [f"vm-{i}" for i in range(5)]
    for name in names:
        emulator.add_instance(name, "us-central1-a")
    for name in names:
        await emulator.wait_for_status(name, "RUNNING")
    local = tmp_path / "project"
    tree(local)
    services = Services(load_config(emulator.write_config(tmp_path / "gcptui.toml", sync_source=local)))
    try:
        instances = await services.machines(names, running=True)
        sessions, relay = services.sync_sessions(instances, fan=2)
        assert relay is not None and relay.name == "vm-0"
        via = {s.name: s.relay.name if s.relay is not None else None for s in sessions}
        assert via == {"vm-0": None, "vm-1": "vm-0", "vm-2": "vm-0", "vm-3": "vm-1", "vm-4": "vm-1"}
        try:
            results = await asyncio.gather(*(s.full_sync(complete=True) for s in sessions))
        finally:
            await asyncio.gather(*(s.close() for s in sessions))
            relay.close()
        assert [r.relayed for r in results] == [0, 2, 2, 2, 2]  # both large files, from vm-0 or from vm-1
        for name in names:
            assert snapshot(emulator.instance(name).disk / "home" / "project") == snapshot(local)  # type: ignore[operator]
    finally:
        await services.close()
