"""The SSH pool against a real OpenSSH sshd: sharing, host keys, auth errors, reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path

import psutil
import pytest

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.ssh.errors import (
    HostKeyChangedError,
    HostKeyUnknownError,
    SshAuthError,
    SshUnreachableError,
)
from gcptui.remote.ssh.host_keys import accept_host_key, fetch_host_key, lookup_name
from gcptui.remote.ssh.pool import HostState, HostStatus, SshPool
from gcptui.remote.ssh.target import SshTarget
from tests.helpers.sshd import Sshd, free_port
from tests.ssh.conftest import FAST_SSH, make_runner, target_of, wait_for


async def test_concurrent_callers_share_one_connection(pool: SshPool, target: SshTarget) -> None:
    changes: list[HostStatus] = []
    pool.subscribe(changes.append)
    conns = await asyncio.gather(*(pool.connection(target) for _ in range(20)))
    assert len({id(c) for c in conns}) == 1
    assert [c.state for c in changes] == [HostState.CONNECTING, HostState.UP]
    result = await conns[0].run("echo shared", check=True)
    assert result.stdout == "shared\n"


async def test_getter_hands_services_the_pooled_connection(pool: SshPool, target: SshTarget) -> None:
    get = pool.getter(target)
    assert await get() is await pool.connection(target)
    status = pool.status("box")
    assert status is not None and status.state is HostState.UP


async def test_unknown_host_key_is_refused_until_the_user_accepts_it(
    pool: SshPool, sshd: Sshd, tmp_path: Path
) -> None:
    known = tmp_path / "ssh" / "known_hosts"  # does not exist yet, nor its folder
    target = target_of(sshd, known_hosts=known)
    with pytest.raises(HostKeyUnknownError) as caught:
        await pool.connection(target)
    err = caught.value
    offered = sshd.host_key.with_suffix(".pub").read_text().split()[1]
    assert "not known" in str(err) and "SHA256:" in str(err) and "accept" in str(err)
    assert offered in str(err)  # the exact line to add is part of the message
    assert err.key is not None and not known.exists()
    assert pool.status("box").state is HostState.DOWN  # type: ignore[union-attr]

    accept_host_key(target, err.key)
    assert known.read_text() == f"[{sshd.host}]:{sshd.port} ssh-ed25519 {offered}\n"
    conn = await pool.connection(target)
    assert (await conn.run("echo trusted")).stdout == "trusted\n"


async def test_changed_host_key_is_refused_and_cannot_be_accepted(
    pool: SshPool, sshd: Sshd, tmp_path: Path
) -> None:
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    stale = other.with_suffix(".pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"# comment\nelsewhere {stale[0]} {stale[1]}\n[{sshd.host}]:{sshd.port} {stale[0]} {stale[1]}\n"
    )
    target = target_of(sshd, known_hosts=known)
    with pytest.raises(HostKeyChangedError) as caught:
        await pool.connection(target)
    err = caught.value
    assert "CHANGED" in str(err) and "line 3" in str(err) and "ssh-keygen -R" in str(err)
    assert err.lines == [3]
    with pytest.raises(HostKeyChangedError):
        accept_host_key(target, err.key)  # type: ignore[arg-type]
    assert known.read_text().count("\n") == 3  # untouched


async def test_gce_alias_is_the_only_name_looked_up(pool: SshPool, sshd: Sshd, tmp_path: Path) -> None:
    public = sshd.host_key.with_suffix(".pub").read_text().split()
    known = tmp_path / "google_compute_known_hosts"
    known.write_text(f"compute.4242 {public[0]} {public[1]}\n")
    gce = target_of(sshd, known_hosts=known, host_key_alias="compute.4242")
    assert lookup_name(gce) == "compute.4242"
    assert (await (await pool.connection(gce)).run("echo via-alias")).stdout == "via-alias\n"

    # The same file does not vouch for the bare address: an alias entry is not an address entry.
    bare = target_of(sshd, name="bare", known_hosts=known)
    with pytest.raises(HostKeyUnknownError):
        await pool.connection(bare)


async def test_fetch_host_key_shows_the_key_without_logging_in(sshd: Sshd) -> None:
    key = await fetch_host_key(target_of(sshd))
    assert key is not None
    assert (
        key.export_public_key().decode().split()[1]
        == sshd.host_key.with_suffix(".pub").read_text().split()[1]
    )


async def test_rejected_key_names_the_key_and_the_user(pool: SshPool, sshd: Sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    target = target_of(sshd, key=stranger)
    with pytest.raises(SshAuthError) as caught:
        await pool.connection(target)
    assert str(stranger) in str(caught.value) and repr(sshd.user) in str(caught.value)
    status = pool.status("box")
    assert status is not None and status.state is HostState.DOWN and status.retry_in is None


async def test_refused_port_is_reported_and_retried(pool: SshPool, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    target = SshTarget("gone", "127.0.0.9", free_port("127.0.0.9"), "root", None, known)
    with pytest.raises(SshUnreachableError, match="connection refused"):
        await pool.connection(target)
    status = pool.status("gone")
    assert status is not None and status.state is HostState.DOWN and status.retry_in is not None


async def test_pool_reconnects_by_itself_after_sshd_comes_back(
    pool: SshPool, sshd: Sshd, target: SshTarget
) -> None:
    changes, _ = pool.queue()
    first = await pool.connection(target)
    sshd.stop()

    async def saw(state: HostState) -> bool:
        while not changes.empty():
            if changes.get_nowait().state is state:
                return True
        return False

    await wait_for(lambda: saw(HostState.DOWN), what="the pool to notice the drop")
    with pytest.raises(SshUnreachableError):
        await pool.connection(target)  # while sshd is away, callers get the attempt's error
    sshd.start()
    # Nobody asks for the connection: the pool's own retries bring the host back up.
    await wait_for(lambda: saw(HostState.UP), what="the pool to reconnect on its own")
    second = await pool.connection(target)
    assert second is not first
    assert (await second.run("echo back")).stdout == "back\n"


async def test_status_reads_the_truth_again_after_sshd_restart(
    sshd: Sshd, host: Reach, remote_home: Path
) -> None:
    runner: JobRunner = make_runner(remote_home, command="sleep 600")
    started = await runner.start(host)
    sshd.stop()
    sshd.start()

    async def running_again() -> bool:
        try:
            return (await runner.status(host)).state == "running"
        except SshUnreachableError:
            return False

    await wait_for(running_again, what="status over the reconnected pool")
    status = await runner.status(host)
    assert status.pid == started.pid and status.started_at == started.started_at
    await runner.kill(host)


async def test_closed_pool_refuses_new_work(target: SshTarget) -> None:
    pool = SshPool(FAST_SSH)
    await pool.connection(target)
    await pool.close()
    with pytest.raises(SshUnreachableError, match="closed"):
        await pool.connection(target)


async def test_new_address_for_a_name_replaces_its_connection(
    pool: SshPool, sshd: Sshd, target: SshTarget, client_key: Path, tmp_path: Path
) -> None:
    # A preempted VM comes back with a new external IP under the same name.
    moved = Sshd(directory=tmp_path / "moved", host="127.0.0.249", client_key=client_key)
    moved.setup()
    moved.start()
    try:
        old = await pool.connection(target)
        new = await pool.connection(target_of(moved))
        assert new is not old and new.get_extra_info("peername")[0] == "127.0.0.249"
        await wait_for(lambda: _true(old.is_closed()), what="the old connection to close")
        await pool.disconnect("box")
        assert pool.status("box") is None and new.is_closed()
    finally:
        moved.stop()


async def _true(value: bool) -> bool:
    return value


async def test_keepalives_notice_a_server_that_went_silent(
    pool: SshPool, sshd: Sshd, target: SshTarget
) -> None:
    # Freeze the server's session process: no FIN, no RST, just silence, as a dead link looks.
    changes, _ = pool.queue()
    await pool.connection(target)
    assert sshd.process is not None
    frozen = psutil.Process(sshd.process.pid).children(recursive=True)
    for proc in frozen:
        with contextlib.suppress(psutil.NoSuchProcess):  # a short-lived helper may be gone already
            proc.suspend()
    try:

        async def down() -> bool:
            while not changes.empty():
                if changes.get_nowait().state is HostState.DOWN:
                    return True
            return False

        # keepalive 1 s x 3 unanswered probes (FAST_SSH), with no read pending from any caller.
        await wait_for(down, timeout=15, what="keepalives to declare the link dead")
    finally:
        for proc in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()
