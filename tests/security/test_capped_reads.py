"""`exec_capped`: what a VM prints costs the laptop at most the cap, and a stderr flood never stalls
stdout (real OpenSSH sshd on loopback)."""

from __future__ import annotations

import time

from gcptui.remote.models import ConnectionGetter
from gcptui.remote.ssh.capped import MAX_STDERR, exec_capped
from tests.logs.conftest import get_conn, ssh  # noqa: F401 - the fixture

CAP = 1 << 20


async def test_stdout_past_the_cap_is_never_read(get_conn: ConnectionGetter) -> None:  # noqa: F811
    start = time.monotonic()
    # Endless output: only the cap is read, then the channel is closed.
    result = await exec_capped(ssh(get_conn), "yes 0123456789", max_bytes=CAP, timeout=60)
    assert result.truncated and result.exit_status is None
    assert len(result.stdout) == CAP and result.stdout.startswith("0123456789\n")
    assert time.monotonic() - start < 30


async def test_a_stderr_flood_is_drained_and_cut(get_conn: ConnectionGetter) -> None:  # noqa: F811
    command = "head -c 20000000 /dev/zero | tr '\\0' e >&2; echo done"
    result = await exec_capped(ssh(get_conn), command, max_bytes=CAP, timeout=60)
    assert result.stdout == "done\n" and result.exit_status == 0 and not result.truncated
    assert len(result.stderr) == MAX_STDERR


async def test_stdin_and_the_exit_status_come_through(get_conn: ConnectionGetter) -> None:  # noqa: F811
    result = await exec_capped(ssh(get_conn), "cat; exit 3", max_bytes=CAP, timeout=60, input="hello\n")
    assert (result.stdout, result.exit_status, result.truncated) == ("hello\n", 3, False)
