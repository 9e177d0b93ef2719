"""Job control on a real OpenSSH sshd: the job is detached, killed precisely, and reported truly.

The sshd runs on this machine, so tests look at the job's processes directly with psutil.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.compute.ssh_exec import pool_reach
from gcptui.remote.config import JobConfig, SshConfig, StorageConfig
from gcptui.remote.jobs.protocol import JobStatus, metrics_path, parse_status
from gcptui.remote.jobs.runner import JobAlreadyRunningError, JobError, JobRunner
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget
from tests.helpers.sshd import Sshd
from tests.ssh.conftest import group_members, make_runner, process_alive, target_of, wait_for


async def finished(runner: JobRunner, host: Reach) -> JobStatus:
    """Wait until the job is no longer running and return its status."""
    last: list[JobStatus] = []

    async def done() -> bool:
        last.append(await runner.status(host))
        return last[-1].state != "running"

    await wait_for(done, what="the job to end")
    return last[-1]


async def test_status_reads_none_where_nothing_ever_ran(host: Reach, remote_home: Path) -> None:
    status = await make_runner(remote_home, command="true").status(host)
    assert status == JobStatus(name="box", state="none")
    assert status.to_json() == {
        "name": "box", "state": "none", "pid": None, "exit_code": None, "started_at": None, "command": None,
        "pgid": None, "ended_at": None, "phase": None, "detail": None,
    }  # fmt: skip


async def test_start_runs_setup_once_then_the_command_in_dest_with_env(
    host: Reach, remote_home: Path
) -> None:
    runner = make_runner(
        remote_home,
        setup="echo setup >> setup.log",
        command='printf "%s\\n" "$PWD" "$GCPTUI_METRICS" "$LR" > env.txt',
        env={"LR": "3e-4 warm"},
    )
    started = await runner.start(host)
    assert started.state in ("running", "exited") and started.pid is not None and started.started_at
    ended = await finished(runner, host)
    assert (ended.state, ended.exit_code) == ("exited", 0)
    project = remote_home / "project"
    assert (project / "env.txt").read_text().splitlines() == [
        str(project), str(remote_home / ".gcptui/job/metrics.jsonl"), "3e-4 warm",
    ]  # fmt: skip
    assert (remote_home / ".gcptui/setup.done").exists()

    await runner.start(host)
    await finished(runner, host)
    assert (project / "setup.log").read_text() == "setup\n"  # not again on the same disk
    log = (remote_home / ".gcptui/job/output.log").read_text()
    assert log.count("job started") == 2  # appended across starts, one banner each


async def test_failed_setup_is_reported_and_the_command_never_runs(host: Reach, remote_home: Path) -> None:
    runner = make_runner(remote_home, setup="exit 5", command="touch ran")
    await runner.start(host)
    ended = await finished(runner, host)
    assert (ended.state, ended.exit_code, ended.phase) == ("exited", 5, "setup")
    assert not (remote_home / "project/ran").exists()
    assert not (remote_home / ".gcptui/setup.done").exists()


async def test_exit_code_of_a_failing_job_is_reported(host: Reach, remote_home: Path) -> None:
    runner = make_runner(remote_home, command="echo doomed; exit 3")
    await runner.start(host)
    ended = await finished(runner, host)
    assert (ended.state, ended.exit_code) == ("exited", 3)
    assert ended.ended_at is not None and ended.command == "echo doomed; exit 3"
    assert "doomed" in (remote_home / ".gcptui/job/output.log").read_text()


async def test_command_with_spaces_quotes_and_semicolons_runs_exactly_as_typed(
    host: Reach, remote_home: Path
) -> None:
    command = """printf '%s\\n' "a  b" 'c"d' "e'f" '$HOME' > out.txt; echo 'x;y' >> out.txt"""
    runner = make_runner(remote_home, command=command)
    await runner.start(host)
    ended = await finished(runner, host)
    assert ended.exit_code == 0 and ended.command == command
    assert (remote_home / "project/out.txt").read_text() == "a  b\nc\"d\ne'f\n$HOME\nx;y\n"


async def test_start_is_refused_while_a_job_runs(host: Reach, remote_home: Path) -> None:
    runner = make_runner(remote_home, command="sleep 600")
    first = await runner.start(host)
    with pytest.raises(JobAlreadyRunningError, match=r"already running on box \(pid \d+, started .*restart"):
        await runner.start(host)
    assert (await runner.status(host)).pid == first.pid
    await runner.kill(host)


async def test_kill_ends_the_job_group_and_leaves_a_decoy_python_running(
    host: Reach, remote_home: Path
) -> None:
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        # A job with a helper process beside the main one, as a DataLoader would have.
        runner = make_runner(
            remote_home, command=f"sleep 600 & exec {sys.executable} -c 'import time; time.sleep(600)'"
        )
        started = await runner.start(host)
        assert started.pgid is not None
        await wait_for(lambda: _true(len(group_members(started.pgid)) >= 3), what="the job's processes")
        killed = await runner.kill(host)
        assert killed.state == "killed" and killed.exit_code == 143 and killed.ended_at
        assert group_members(started.pgid) == []
        assert process_alive(decoy.pid)  # the other python of the same user survives
    finally:
        decoy.kill()
        decoy.wait()


async def test_job_ends_only_when_its_whole_group_has_even_if_the_shell_exits_first(
    host: Reach, remote_home: Path
) -> None:
    # The shell exits at once; the python it left behind (a trainer saving its checkpoint after a
    # SIGTERM) takes a moment. The job must not read as ended before that save is on disk.
    saver = "import signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.8), open('saved','w').write('ok'), sys.exit(143))); open('ready','w').close(); time.sleep(600)"
    command = (
        f"{sys.executable} -c {saver!r} & while [ ! -f ready ]; do sleep 0.05; done; kill -TERM $!; exit 5"
    )
    runner = make_runner(remote_home, command=command)
    await runner.start(host)
    ended = await finished(runner, host)
    assert (remote_home / "project" / "saved").read_text() == "ok"
    assert (ended.state, ended.exit_code) == ("exited", 5)


async def test_kill_escalates_to_sigkill_after_the_grace(host: Reach, remote_home: Path) -> None:
    runner = make_runner(remote_home, command="trap '' TERM; sleep 600", stop_grace_seconds=0.3)
    started = await runner.start(host)
    killed = await runner.kill(host)
    assert (killed.state, killed.exit_code) == ("killed", 137)
    assert group_members(started.pgid) == []  # type: ignore[arg-type]
    assert "SIGKILL" in (remote_home / ".gcptui/job/output.log").read_text()


async def test_kill_with_nothing_running_changes_nothing(host: Reach, remote_home: Path) -> None:
    runner = make_runner(remote_home, command="exit 4")
    assert (await runner.kill(host)).state == "none"
    await runner.start(host)
    await finished(runner, host)
    after = await runner.kill(host)
    assert (after.state, after.exit_code) == ("exited", 4)


async def test_restart_kills_then_runs_the_resume_command(host: Reach, remote_home: Path) -> None:
    runner = make_runner(remote_home, command="sleep 600", resume="echo resumed > resumed.txt; sleep 600")
    first = await runner.start(host)
    second = await runner.restart(host)
    assert second.state == "running" and second.pgid != first.pgid
    assert second.command == "echo resumed > resumed.txt; sleep 600"
    assert group_members(first.pgid) == []  # type: ignore[arg-type]
    await wait_for(lambda: _true((remote_home / "project/resumed.txt").exists()), what="the resume command")
    await runner.kill(host)


async def test_job_survives_the_client_process_exiting_and_the_connection_dropping(
    sshd: Sshd, target: SshTarget, remote_home: Path, tmp_path: Path
) -> None:
    # A separate client process starts the job and exits, as `gcptui job start` does.
    script = tmp_path / "client.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, json
        from pathlib import Path
        from gcptui.remote.compute.ssh_exec import pool_reach
        from gcptui.remote.config import JobConfig, StorageConfig, SshConfig
        from gcptui.remote.jobs.runner import JobRunner
        from gcptui.remote.ssh.pool import SshPool
        from gcptui.remote.ssh.target import SshTarget

        async def main():
            target = SshTarget("box", {sshd.host!r}, {sshd.port}, {sshd.user!r}, Path({str(sshd.client_key)!r}),
                               Path({str(sshd.known_hosts)!r}))
            async with SshPool(SshConfig(connect_timeout=5)) as pool:
                runner = JobRunner(JobConfig(command="sleep 600"), "~/project", remote_home={str(remote_home)!r})
                print(json.dumps((await runner.start(pool_reach(pool, target))).to_json()))

        asyncio.run(main())
    """)
    )
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}  # this checkout's remote/, not an installed one
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         cwd=root, env=env, check=True)  # fmt: skip
    started = json.loads(out.stdout.splitlines()[-1])
    assert started["state"] == "running" and process_alive(started["pid"])

    sshd.stop()  # the server and every session it forked are gone
    assert process_alive(started["pid"])
    sshd.start()
    async with SshPool(SshConfig(connect_timeout=5)) as pool:
        runner = make_runner(remote_home, command="sleep 600")
        host = pool_reach(pool, target)
        status = await runner.status(host)
        assert (status.state, status.pid) == ("running", started["pid"])
        await runner.kill(host)


async def test_several_hosts_at_once_give_one_result_each_and_one_start_wins(
    pool: SshPool, sshd: Sshd, host: Reach, remote_home: Path, client_key: Path, tmp_path: Path
) -> None:
    # Two sshds on this one machine share the job directory: like two laptops starting the same VM.
    second = Sshd(directory=tmp_path / "sshd2", host="127.0.0.250", client_key=client_key)
    second.setup()
    second.start()
    try:
        other = pool_reach(pool, target_of(second, name="box2"))
        dead = pool_reach(pool, SshTarget("dead", "127.0.0.251", 1, "root", None, tmp_path / "none"))
        runner = make_runner(remote_home, command="sleep 600")
        results = await runner.run_all("start", [host, other, dead])
        assert [r.name for r in results] == ["box", "box2", "dead"]
        assert "connection refused" in str(results[2].error)
        winners = [r for r in results[:2] if r.ok]
        losers = [r for r in results[:2] if not r.ok]
        assert len(winners) == 1 and isinstance(losers[0].error, JobAlreadyRunningError)
        states = await runner.run_all("status", [host, other])
        assert [r.value.pid for r in states if r.value] == [winners[0].value.pid] * 2  # type: ignore[union-attr]
        killed = await runner.run_all("kill", [host])
        assert killed[0].value and killed[0].value.state == "killed"
    finally:
        second.stop()


async def test_missing_project_directory_says_to_sync_first(host: Reach, tmp_path: Path) -> None:
    runner = JobRunner(make_runner(tmp_path, command="true").job, "~/nowhere", remote_home=str(tmp_path))
    with pytest.raises(JobError, match=r"nowhere does not exist.*gcptui sync box --once"):
        await runner.start(host)


def test_metrics_path_follows_job_env() -> None:
    runner_job = make_runner(Path("/tmp"), command="x").job
    assert metrics_path(runner_job, "~/project") == ".gcptui/job/metrics.jsonl"
    env_job = runner_job.model_copy(update={"env": {"GCPTUI_METRICS": "runs/m.jsonl"}})
    assert metrics_path(env_job, "~/project") == "project/runs/m.jsonl"


def test_parse_status_keeps_a_multiline_command() -> None:
    status = parse_status("vm", "state=running\npid=12\npgid=11\nexit_code=\ncommand:\nline one\nline two\n")
    assert (status.state, status.pid, status.pgid, status.exit_code) == ("running", 12, 11, None)
    assert status.command == "line one\nline two"


async def _true(value: bool) -> bool:
    return value


async def test_a_configured_bucket_reaches_the_job_as_its_checkpoint_url(
    host: Reach, remote_home: Path
) -> None:
    runner = JobRunner(
        JobConfig(command='printf "%s" "$GCPTUI_CHECKPOINT_URL" > url.txt', stop_grace_seconds=2.0),
        "~/project",
        remote_home=str(remote_home),
        storage=StorageConfig(bucket="gs://team-bucket/runs/"),
    )
    await runner.start(host)
    await finished(runner, host)
    assert (remote_home / "project" / "url.txt").read_text() == "gs://team-bucket/runs/box"
