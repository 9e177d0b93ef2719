"""LogStream on an emulated VM: its job writes numbered lines while the SSH connection is cut."""

from __future__ import annotations

import asyncssh

from gcptui.remote.emulator import Emulator
from gcptui.remote.telemetry.log_stream import LogStream
from tests.helpers.emulator import connect
from tests.logs.conftest import ssh
from tests.logs.test_log_stream import Collector


async def test_cut_connection_mid_stream_on_an_emulated_vm_loses_and_repeats_no_line(
    emulator: Emulator,
) -> None:
    emulator.add_instance("vm", "us-central1-a")
    await emulator.wait_for_status("vm", "RUNNING")
    connections: list[asyncssh.SSHClientConnection] = []

    async def get_conn() -> asyncssh.SSHClientConnection:
        if not connections or connections[-1].is_closed():
            connections.append(await connect(emulator, "vm"))
        return connections[-1]

    total = 3000
    # The writer runs on the VM itself, detached, as a training job would.
    writer = (
        "setsid sh -c 'n=0; while [ $n -lt " + str(total) + ' ]; do printf "line %05d payload\\n" $n;'
        " n=$((n+1)); [ $((n % 50)) -eq 0 ] && sleep 0.05; done' >> out.log 2>&1 < /dev/null &"
    )
    conn = await get_conn()
    await conn.run(": > out.log", check=True)
    got = Collector(LogStream(ssh(get_conn), "~/out.log", history_lines=0, poll_interval=0.05).events())
    await got.wait_for(lambda: any(n.kind == "following" for n in got.notices))
    await conn.run(writer, check=True)
    await got.wait_for(lambda: len(got.lines) > 300)
    connections[-1].abort()  # the link drops mid-stream; the job goes on writing
    await got.wait_for(lambda: len(got.lines) >= total, timeout=60)
    await got.stop()

    assert got.lines[:total] == [f"line {n:05d} payload" for n in range(total)]
    assert len(connections) >= 2
    assert any(n.kind == "reconnecting" for n in got.notices)
    for c in connections:
        c.close()
