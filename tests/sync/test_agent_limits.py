"""A misbehaving far end (a stalled frame, a huge announced frame) ends a request with a clear error."""

from __future__ import annotations

import shlex
import time

import pytest

from gcptui.remote.sync.agent_client import AgentLost, RemoteAgent
from tests.helpers.sshd import Sshd
from tests.sync.conftest import openssh_getter

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
