"""Pulls over a plain exec channel (no SFTP: a GKE pod's Kubernetes exec) through the machine's
pull reader (remote/vm/pull_reader.py): whole, resumable, skipping what is complete, one-line errors.
The channel is SSH to a loopback sshd wrapped so that it offers exec alone."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.config import SshConfig
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget
from gcptui.remote.transfer.pull import PART_SUFFIX, PullError, pull
from tests.cli.test_pull import run_tree, tree
from tests.helpers.plain_channel import PlainChannel
from tests.helpers.sshd import Sshd


@pytest.fixture
async def channel(sshd: Sshd) -> AsyncIterator[PlainChannel]:
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())
    try:
        yield PlainChannel(SshExecChannel(pool.getter(target), lambda: "box"))
    finally:
        await pool.close()


async def test_a_pull_over_exec_alone_copies_skips_and_resumes(channel: PlainChannel, tmp_path: Path) -> None:
    remote = tmp_path / "vm" / "demo"
    files = run_tree(remote)
    (remote / "link.pt").symlink_to(remote / "artifacts" / "best.pt")  # below the folder: not followed
    local = tmp_path / "laptop"
    planned: list[tuple[int, int]] = []
    result = await pull(channel, str(remote), local, planned=lambda f, b: planned.append((f, b)))
    assert len(channel.commands) == 1 and "gcptui pull needs python3" in channel.commands[0]  # one reader
    assert tree(local / "demo") == files
    assert sorted(result.copied) == sorted(files)
    assert planned == [(len(files), sum(map(len, files.values())))]
    mtime = int((remote / "metrics.jsonl").stat().st_mtime)
    assert int((local / "demo" / "metrics.jsonl").stat().st_mtime) == mtime  # the machine's time

    again = await pull(channel, str(remote), local)
    assert (again.copied, sorted(again.complete)) == ([], sorted(files))

    # A stopped copy's part file (a prefix of this very version) is resumed, not started over.
    big = "checkpoints/step-000000200.pt"
    (local / "demo" / big).unlink()
    part = local / "demo" / "checkpoints" / f".step-000000200.pt{PART_SUFFIX}"
    part.write_bytes(files[big][: 2**20])
    stamp = (remote / big).stat().st_mtime
    os.utime(part, (stamp, stamp))
    resumed = await pull(channel, str(remote), local)
    assert resumed.resumed == [big] and resumed.bytes_copied == len(files[big]) - 2**20
    assert (local / "demo" / big).read_bytes() == files[big] and not part.exists()

    single = await pull(channel, str(remote / "empty.txt"), tmp_path / "one")
    assert single.copied == ["empty.txt"] and (tmp_path / "one" / "empty.txt").read_bytes() == b""


async def test_a_missing_path_over_exec_is_one_line(channel: PlainChannel, tmp_path: Path) -> None:
    with pytest.raises(PullError, match=r"does not exist on the VM: check the path") as caught:
        await pull(channel, str(tmp_path / "nowhere"), tmp_path / "laptop")
    assert "\n" not in str(caught.value)


async def test_a_machine_without_python_says_so_in_one_line(sshd: Sshd, tmp_path: Path) -> None:
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())
    try:
        bare = PlainChannel(SshExecChannel(pool.getter(target), lambda: "box"),
                            instead=lambda _: "echo 'gcptui pull needs python3 on the machine' >&2; exit 127")  # fmt: skip
        with pytest.raises(PullError, match="needs python3 on the machine"):
            await pull(bare, str(tmp_path), tmp_path / "laptop")
    finally:
        await pool.close()
