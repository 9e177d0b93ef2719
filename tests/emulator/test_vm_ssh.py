"""Emulated VMs over real SSH: host key checking by alias, the VM's shell, detached processes, SFTP."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import asyncssh
import psutil
import pytest

from gcptui.remote.emulator import Emulator
from tests.helpers.emulator import connect, eventually


async def _running(emu: Emulator, name: str, **options: object) -> None:
    emu.add_instance(name, "us-central1-a", **options)  # type: ignore[arg-type]
    await emu.wait_for_status(name, "RUNNING")


async def test_known_hosts_holds_one_compute_alias_line_per_vm(emulator: Emulator) -> None:
    await _running(emulator, "a")
    await _running(emulator, "b")
    lines = emulator.known_hosts.read_text().splitlines()
    ids = {emulator.instance(n).id for n in ("a", "b")}
    assert sorted(line.split()[0] for line in lines) == sorted(f"compute.{i}" for i in ids)
    assert all(line.split()[1] == "ssh-ed25519" for line in lines)


async def test_host_key_is_checked_through_the_alias(emulator: Emulator) -> None:
    await _running(emulator, "a")
    await _running(emulator, "b")
    async with await connect(emulator, "a") as conn:
        assert (await conn.run("echo ok", check=True)).stdout == "ok\n"
    # Presenting b's key under a's alias must fail: the alias pins the key, not the address.
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect(
            emulator.address("b"), port=emulator.ssh_port_of("b"), known_hosts=str(emulator.known_hosts),
            host_key_alias=f"compute.{emulator.instance('a').id}", client_keys=[str(emulator.client_key)],
            agent_path=None, config=None,
        )  # fmt: skip


async def test_commands_run_in_home_with_the_vms_path(emulator: Emulator) -> None:
    await _running(emulator, "gpu", gpus=[("nvidia-l4", 2)])
    home = emulator.instance("gpu").disk / "home"  # type: ignore[operator]
    async with await connect(emulator, "gpu") as conn:
        result = await conn.run('pwd; echo "$HOME"; command -v python', check=True)
        cwd, env_home, python = result.stdout.splitlines()
        assert cwd == env_home == str(home)
        assert Path(python).parent == Path(sys.executable).parent
        query = (
            "nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw "
            "--format=csv,noheader,nounits"
        )
        rows = [line.split(", ") for line in (await conn.run(query, check=True)).stdout.splitlines()]
        assert [r[0] for r in rows] == ["0", "1"] and rows[0][1] == "NVIDIA L4"
        assert 0 <= int(rows[0][2]) <= 100 and int(rows[0][3]) < int(rows[0][4]) == 23034
        assert float(rows[0][6]) > 0
        apps = await conn.run(
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
        )
        assert apps.exit_status == 0
        trainer = await conn.run("python -c 'import gcptui_trainer, sys; print(sys.executable)'", check=True)
        assert trainer.stdout.strip() == sys.executable


async def test_a_vm_without_gpus_has_no_nvidia_smi(emulator: Emulator) -> None:
    await _running(emulator, "cpu")
    async with await connect(emulator, "cpu") as conn:
        assert (await conn.run("command -v nvidia-smi")).exit_status != 0


async def test_stdin_stdout_stderr_and_exit_status_go_through_the_channel(emulator: Emulator) -> None:
    await _running(emulator, "a")
    async with await connect(emulator, "a") as conn:
        result = await conn.run("cat; echo oops >&2; exit 3", input="from stdin\n")
        assert (result.stdout, result.stderr, result.exit_status) == ("from stdin\n", "oops\n", 3)


async def test_detached_process_survives_the_channel_and_dies_on_stop(emulator: Emulator) -> None:
    await _running(emulator, "a")
    home = emulator.instance("a").disk / "home"  # type: ignore[operator]
    async with await connect(emulator, "a") as conn:
        await conn.run(
            "setsid nohup sh -c 'echo $$ > bg.pid; exec sleep 300' >/dev/null 2>&1 </dev/null &", check=True
        )
        # A foreground command left running when the client goes away gets hung up, as under sshd.
        fg = await conn.create_process("echo $$ > fg.pid; exec sleep 300")
        await eventually(lambda: (home / "fg.pid").exists() and (home / "fg.pid").read_text().strip())
        fg.close()
    background = int(
        await eventually(lambda: (home / "bg.pid").exists() and (home / "bg.pid").read_text().strip())
    )
    foreground = int((home / "fg.pid").read_text())
    await eventually(lambda: not _alive(foreground))  # hung up (even when the emulator runs under nohup)
    assert _alive(background)
    emulator.fleet.stop(emulator.instance("a"))  # type: ignore[union-attr]
    await emulator.wait_for_status("a", "TERMINATED")
    assert not _alive(background)


async def test_a_background_child_holding_stdout_keeps_the_session_open_as_under_sshd(
    emulator: Emulator,
) -> None:
    # sshd closes the channel only when the shell has exited and its output has reached EOF, so a
    # command that leaves a child holding stdout (`cmd &`) does not return before that child is done.
    await _running(emulator, "a")
    async with await connect(emulator, "a") as conn:
        result = await conn.run("(sleep 0.3; echo late) & echo early", check=True)
        assert result.stdout == "early\nlate\n"


async def test_a_child_holding_stdout_loses_it_when_the_client_goes_away(emulator: Emulator) -> None:
    # A detached writer (own session, so the hang-up misses it) still holds the channel's stdout. Once
    # the client closes the channel, the session closes its ends of the pipes, so nothing of it lingers
    # in the emulator's process; the writer sees EPIPE, as it would once sshd closed them.
    await _running(emulator, "a")
    home = emulator.instance("a").disk / "home"  # type: ignore[operator]
    async with await connect(emulator, "a") as conn:
        writer = "trap '' PIPE; while echo tick; do sleep 0.05; done; echo closed > gone"
        process = await conn.create_process(f"setsid sh -c {shlex.quote(writer)} & echo started")
        assert await process.stdout.readline() == "started\n"
        assert await process.stdout.readline() == "tick\n"
        process.close()
        await process.wait_closed()
    assert await eventually(lambda: (home / "gone").exists() and (home / "gone").read_text()) == "closed\n"


async def test_preemption_flips_metadata_sigterms_then_sigkills(emulator: Emulator) -> None:
    await _running(emulator, "spot", spot=True)
    home = emulator.instance("spot").disk / "home"  # type: ignore[operator]
    watcher = (
        "import os, signal, urllib.request\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # outlive the soft-off to record what it saw\n"
        "url = 'http://' + os.environ['GCE_METADATA_HOST'] + '/computeMetadata/v1/instance/preempted'\n"
        "get = lambda q: urllib.request.urlopen(urllib.request.Request(url + q, headers={'Metadata-Flavor': 'Google'}))\n"
        "first = get('')\n"
        "etag = first.headers['ETag']  # waiting from this etag cannot miss a change that comes first\n"
        "open('before', 'w').write(first.read().decode())\n"
        "open('after', 'w').write(get('?wait_for_change=true&last_etag=' + etag).read().decode())\n"
    )
    async with await connect(emulator, "spot") as conn:
        await conn.run(f"cat > watch.py <<'EOF'\n{watcher}EOF", check=True)
        await conn.run("setsid python watch.py >watch.log 2>&1 </dev/null &", check=True)
        polite = "trap 'echo $$ > got-term; exit 0' TERM; echo $$ > polite; while :; do sleep 0.05; done\n"
        stubborn = "trap '' TERM; echo $$ > stubborn; while :; do sleep 0.05; done\n"
        await conn.run(
            f"cat > polite.sh <<'EOF'\n{polite}EOF\ncat > stubborn.sh <<'EOF'\n{stubborn}EOF", check=True
        )
        for script in ("polite.sh", "stubborn.sh"):
            await conn.run(f"setsid sh {script} >/dev/null 2>&1 </dev/null &", check=True)
        await eventually(lambda: all(_read(home / f) for f in ("polite", "stubborn", "before")))
    assert (home / "before").read_text() == "FALSE"
    stubborn_pid = int((home / "stubborn").read_text())
    emulator.preempt("spot")
    await eventually(lambda: _read(home / "after"))
    assert (home / "after").read_text() == "TRUE"
    await eventually(lambda: (home / "got-term").exists())  # the trap ran inside the grace period
    assert emulator.instance("spot").status == "STOPPING" and _alive(stubborn_pid)
    await emulator.wait_for_status("spot", "TERMINATED", timeout=emulator.timing.preempt_grace_seconds + 10)
    assert not _alive(stubborn_pid)
    ops = [op for ops in emulator.fleet.operations.values() for op in ops]  # type: ignore[union-attr]
    preempted = [op for op in ops if op.operation_type == "compute.instances.preempted"]
    assert (
        len(preempted) == 1 and preempted[0].user == "system" and preempted[0].name.startswith("systemevent-")
    )


async def test_restart_gives_a_new_address_same_disk_and_same_host_key(emulator: Emulator) -> None:
    await _running(emulator, "spot", spot=True)
    first, first_port = emulator.address("spot"), emulator.ssh_port_of("spot")
    async with await connect(emulator, "spot") as conn:
        await conn.run("mkdir -p project && echo kept > project/file", check=True)
        key_before = conn.get_server_host_key().export_public_key()  # type: ignore[union-attr]
    emulator.preempt("spot")
    await emulator.wait_for_status("spot", "TERMINATED")
    with pytest.raises(OSError):
        await asyncssh.connect(first, port=first_port, known_hosts=None, agent_path=None, config=None,
                               client_keys=[str(emulator.client_key)], connect_timeout=2)  # fmt: skip
    emulator.fleet.start(emulator.instance("spot"))  # type: ignore[union-attr]
    await emulator.wait_for_status("spot", "RUNNING")
    assert (emulator.address("spot"), emulator.ssh_port_of("spot")) != (first, first_port)
    async with await connect(emulator, "spot") as conn:
        assert (await conn.run("cat project/file", check=True)).stdout == "kept\n"
        assert conn.get_server_host_key().export_public_key() == key_before  # type: ignore[union-attr]


async def test_sftp_starts_in_home_and_stays_on_the_disk(emulator: Emulator) -> None:
    await _running(emulator, "a")
    home = emulator.instance("a").disk / "home"  # type: ignore[operator]
    async with await connect(emulator, "a") as conn, conn.start_sftp_client() as sftp:
        assert await sftp.realpath(".") == str(home)
        await sftp.mkdir("project")
        async with sftp.open("project/x.txt", "w") as f:
            await f.write("hello")
        assert (await conn.run(f"cat {home}/project/x.txt", check=True)).stdout == "hello"
        assert await sftp.exists(f"{home}/project/x.txt")  # absolute paths read as the shell sees them
        with pytest.raises(asyncssh.SFTPError):
            await sftp.listdir("/etc")
        with pytest.raises(asyncssh.SFTPError):
            await sftp.stat("../../../../../../etc/passwd")


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_login_on_a_terminal_has_job_control_and_no_complaint(emulator: Emulator) -> None:
    """`ssh VM` (a pty, no command): the shell's terminal is its controlling one, as under sshd, so
    it never prints "can't access tty; job control turned off", and `cmd &` is a job of its own."""
    await _running(emulator, "a")
    async with await connect(emulator, "a") as conn:
        process = await conn.create_process(term_type="xterm", term_size=(80, 24))
        # $$ is the shell; a background job in monitor mode gets a process group of its own.
        process.stdin.write(
            'sleep 30 & echo "groups $(ps -o pgid= -p $$) $(ps -o pgid= -p $!)"; kill $!; exit\n'
        )
        output = await process.stdout.read()
        await process.wait()
    assert "tty" not in output and "job control" not in output, output
    shell_group, job_group = output.split("groups ")[-1].split()[:2]
    assert shell_group != job_group, output
