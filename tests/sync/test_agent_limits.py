"""A misbehaving far end (a stalled frame, a huge announced frame) ends a request with a clear error."""

from __future__ import annotations

import asyncio
import shlex
import time
from pathlib import Path

import pytest

from gcptui.remote.sync.agent_client import AGENT_SOURCE, AgentLost, RemoteAgent
from tests.helpers.sshd import Sshd
from tests.sync.conftest import openssh_getter
from tests.sync.trees import wait_for

# Stands in for an agent: reads one request, announces a reply of SIZE bytes, sends one, stalls.
FAKE = (
    "import os,struct,sys,time\n"
    "os.read(0, 65536)\n"
    "sys.stdout.buffer.write(struct.pack('>I', SIZE) + b'{')\n"
    "sys.stdout.buffer.flush()\n"
    "time.sleep(60)\n"
)


async def start_fake(sshd: Sshd, size: int) -> RemoteAgent:
    conn = await openssh_getter(sshd)()
    source = FAKE.replace("SIZE", str(size))
    process = await conn.create_process(f"exec python3 -c {shlex.quote(source)}", encoding=None)
    return RemoteAgent(process, reply_timeout=5, stall_timeout=1)


@pytest.mark.parametrize(
    ("size", "message"), [(100_000_000, "stalled after 1 of 100000000 bytes"), (2**31, "exceeds")]
)
async def test_a_stalled_or_oversized_reply_ends_the_request(sshd: Sshd, size: int, message: str) -> None:
    agent = await start_fake(sshd, size)
    started = time.monotonic()
    with pytest.raises(AgentLost, match=message):
        await agent.request({"op": "scan"})
    assert time.monotonic() - started < 4
    agent.close()


async def test_a_request_cancelled_before_it_went_out_retires_the_agent(sshd: Sshd, tmp_path: Path) -> None:
    """Cancelled while its header waits for the channel (the VM's disk is slow), a flush may still
    reach the agent, whose reply the next request would read as its own: the agent is retired, and
    a reply that is not the one awaited is refused as out of step (AgentLost), never misread."""
    gate, dest = tmp_path / "gate", tmp_path / "dest"
    conn = await openssh_getter(sshd)()
    # The real agent, started only once the gate exists: until then nothing reads its input.
    command = f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.02; done; exec python3 -I -S -c {shlex.quote(AGENT_SOURCE)}"
    agent = RemoteAgent(await conn.create_process(command, encoding=None))
    size = 8 << 20  # more than the channel's window and the pipe hold
    agent._queue({"op": "init", "dest": str(dest)})
    agent._queue({"op": "put", "p": "big.bin", "s": size, "m": 0o644, "t": 0}, b"\0" * size)
    flush = asyncio.create_task(agent.flush())
    await wait_for(lambda: agent._process.channel.get_write_buffer_size() > 0, 10, "a blocked send")
    flush.cancel()
    await asyncio.wait({flush})
    gate.touch()
    assert agent.broken
    with pytest.raises(AgentLost):
        await agent.scan()
    agent._broken = False  # as if the cancellation had gone unnoticed: the ids still tell
    with pytest.raises(AgentLost, match="out of step"):
        await agent.scan()
    agent.close()
