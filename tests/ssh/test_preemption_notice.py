"""The preemption notice path: the VM's metadata server says TRUE, the notice watcher beside the
job records it and SIGTERMs the job's group, and a client watching over its open SSH connection
hears of it within about a second, without any API poll.

Latencies are measured from the preempt call to the event reaching the test and printed (run with
``-s`` to see them).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.config import JobConfig
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.hosts.metadata import MetadataServer
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.ssh.pool import SshPool
from tests.helpers.sshd import Sshd
from tests.ssh.conftest import group_members, make_runner, wait_for
from tests.ssh.emulated import boot, emulator_fixture, home, notice_only, reach_of, start_vm, watching  # noqa: F401
from tests.ssh.test_jobs import finished

# Checkpoints on SIGTERM, as a trainer would: proof that it heard the signal in time.
TRAPPER = """trap 'echo got-term > "$HOME/term.txt"; exit 0' TERM; while :; do sleep 0.1; done"""
NOTICE_BUDGET = 2.0  # seconds from the preempt call to the client's "preempted" event


def runner_for(command: str = TRAPPER) -> JobRunner:
    return JobRunner(JobConfig(command=command, stop_grace_seconds=2.0), "~/project")


def watcher_processes(pgid: int) -> list[str]:
    """Command lines of the notice watcher's processes in the job's group (the subshell, a fetch)."""
    found = []
    for pid in group_members(pgid):
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        if pid != pgid and ("gcptui-job" in cmdline or "computeMetadata" in cmdline):
            found.append(cmdline)
    return found


async def test_preemption_reaches_the_job_and_the_watching_client_within_seconds(
    emulator: Emulator, pool: SshPool
) -> None:
    await boot(emulator, "spot-1", "spot-2")
    doomed, spared = await reach_of(emulator, pool, "spot-1"), await reach_of(emulator, pool, "spot-2")
    runner = runner_for()
    started = await runner.start(doomed)
    await runner.start(spared)
    async with watching(runner.watch(doomed)) as watch:
        await watch.wait("state", where=lambda e: e.status is not None and e.status.state == "running")
        began = time.monotonic()
        emulator.preempt("spot-1")
        seen, notice = await watch.wait("preempted", timeout=10)
        latency = seen - began
        print(f"\npreemption notice latency (preempt call -> client event): {latency * 1000:.0f} ms")
        assert latency < NOTICE_BUDGET
        assert (
            notice.status is not None and notice.status.detail == "preempted" and notice.status.preempted_at
        )
        _, ended = await watch.wait("ended", timeout=10)
        assert ended.status is not None
        # The trainer's trap ran (exit 0) well before the power-off's SIGKILL could take it.
        assert (ended.status.state, ended.status.exit_code, ended.status.detail) == ("exited", 0, "preempted")
        lost = (await watch.wait("lost", timeout=15))[1]  # the VM powered off under the connection
        assert lost.status == ended.status
    await emulator.wait_for_status("spot-1", "TERMINATED")
    assert group_members(started.pgid) == []  # type: ignore[arg-type]
    assert (home(emulator, "spot-1") / "term.txt").read_text() == "got-term\n"
    assert (
        "preemption notice from the metadata server"
        in (home(emulator, "spot-1") / ".gcptui/job/output.log").read_text()
    )

    # The other Spot VM was not preempted: its job runs on, untouched.
    other = await runner.status(spared)
    assert (other.state, other.detail, other.preempted_at) == ("running", None, None)
    assert not (home(emulator, "spot-2") / "term.txt").exists()

    # After the restart keep-alive would do, status still says what happened to the last run.
    await start_vm(emulator, "spot-1")
    after = await runner.status(await reach_of(emulator, pool, "spot-1"))
    assert (after.state, after.exit_code, after.detail) == ("exited", 0, "preempted")
    assert after.preempted_at == notice.status.preempted_at


async def test_the_notice_alone_makes_the_vm_side_watcher_sigterm_the_job(
    emulator: Emulator, pool: SshPool
) -> None:
    # Only the metadata flips (no ACPI SIGTERM from the emulator): the SIGTERM the job gets is ours.
    await boot(emulator, "spot-1")
    vm = await reach_of(emulator, pool, "spot-1")
    runner = runner_for()
    started = await runner.start(vm)
    pgid = started.pgid
    assert pgid is not None
    async with watching(runner.watch(vm)) as watch:
        await watch.wait("state", where=lambda e: e.status is not None and e.status.state == "running")
        # Wait until the watcher long-polls, so the wait_for_change path is the one under test.
        await wait_for(lambda: _true(any("wait_for_change" in c for c in watcher_processes(pgid))),
                       what="the notice watcher's long poll")  # fmt: skip
        began = time.monotonic()
        await notice_only(emulator, "spot-1")
        seen, _ = await watch.wait("preempted", timeout=10)
        print(f"\nnotice-only latency (metadata flip -> client event): {(seen - began) * 1000:.0f} ms")
        assert seen - began < NOTICE_BUDGET
        _, ended = await watch.wait("ended", timeout=10)
        assert ended.status is not None
        assert (ended.status.state, ended.status.exit_code, ended.status.detail) == ("exited", 0, "preempted")
        assert "lost" not in watch.kinds()  # the VM itself keeps running
    assert emulator.instance("spot-1").status == "RUNNING"
    assert (home(emulator, "spot-1") / "term.txt").read_text() == "got-term\n"
    assert group_members(pgid) == []  # the watcher and its fetch ended with the job


async def test_without_a_metadata_server_the_watcher_gives_up_and_the_job_is_unaffected(
    host: Reach, remote_home: Path
) -> None:
    # The sshd fixture is not GCE: no GCE_METADATA_HOST, and metadata.google.internal does not resolve.
    runner = make_runner(remote_home, command="sleep 600")
    started = await runner.start(host)
    assert started.pgid is not None
    await wait_for(lambda: _true(watcher_processes(started.pgid) == []), what="the watcher to give up")  # type: ignore[arg-type]
    status = await runner.status(host)
    assert (status.state, status.pid, status.detail) == ("running", started.pid, None)
    killed = await runner.kill(host)
    assert (killed.state, killed.exit_code, killed.detail) == ("killed", 143, None)
    assert group_members(started.pgid) == []
    assert not (remote_home / ".gcptui/job/preempted").exists()


async def test_a_kill_right_after_start_takes_the_still_retrying_watcher_with_it(
    host: Reach, remote_home: Path
) -> None:
    # A metadata address that refuses connections: the watcher is still between retries at the kill.
    runner = make_runner(remote_home, command="sleep 600", env={"GCE_METADATA_HOST": "127.0.0.1:9"})
    started = await runner.start(host)
    began = time.monotonic()
    killed = await runner.kill(host)
    assert (killed.state, killed.exit_code) == ("killed", 143)
    assert time.monotonic() - began < 1.5  # no wait for the 2 s grace: nothing ignored the SIGTERM
    assert group_members(started.pgid) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("fetcher", ["curl", "wget", sys.executable], ids=["curl", "wget", "python"])
async def test_every_fetcher_sees_the_notice_on_a_real_sshd(
    host: Reach, remote_home: Path, fetcher: str
) -> None:
    # The emulator's metadata server on its own loopback address, named through the job's env.
    metadata = MetadataServer({"instance/preempted": "FALSE"})
    address = await metadata.start("127.0.0.1")
    try:
        runner = make_runner(
            remote_home, command=TRAPPER,
            env={"GCE_METADATA_HOST": address, "GCPTUI_METADATA_FETCHER": fetcher},
        )  # fmt: skip
        started = await runner.start(host)
        pgid = started.pgid
        assert pgid is not None
        await wait_for(lambda: _true(any("wait_for_change" in c for c in watcher_processes(pgid))),
                       what="the notice watcher's long poll")  # fmt: skip
        await metadata.set("instance/preempted", "TRUE")
        ended = await finished(runner, host)
        assert (ended.state, ended.exit_code, ended.detail) == ("exited", 0, "preempted")
        assert ended.preempted_at is not None
        assert (remote_home / "term.txt").read_text() == "got-term\n"
        assert group_members(pgid) == []
    finally:
        await metadata.close()


async def test_the_watch_reports_a_lost_connection_then_resumes_and_leaves_nothing_behind(
    sshd: Sshd, host: Reach, remote_home: Path
) -> None:
    runner = make_runner(remote_home, command="sleep 600")
    started = await runner.start(host)
    async with watching(runner.watch(host)) as watch:
        await watch.wait("state", where=lambda e: e.status is not None and e.status.pid == started.pid)
        sshd.stop()  # the server and the session running the watch are gone
        lost_at, lost = await watch.wait("lost", timeout=10)
        assert lost.status is not None and lost.status.state == "running"
        sshd.start()
        _, back = await watch.wait("state", after=lost_at, timeout=15)  # through the pool's reconnect
        assert back.status is not None and (back.status.state, back.status.pid) == ("running", started.pid)
        await runner.kill(host)
        _, ended = await watch.wait("ended", after=lost_at)
        assert ended.status is not None and (ended.status.state, ended.status.exit_code) == ("killed", 143)
        assert watch.kinds().count("lost") == 1
    # The client stopped watching: the remote watch loop ends too (SIGPIPE at its next heartbeat).
    await wait_for(lambda: _true(_remote_watches(remote_home) == []), what="the remote watch to end")


def _remote_watches(home: Path) -> list[int]:
    """Processes running ``gcptui-job.sh watch`` installed under ``home``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(part.startswith(f"{home}/.gcptui/bin/") for part in cmdline) and "watch" in cmdline:
            found.append(proc.info["pid"])
    return found


async def _true(value: bool) -> bool:
    return value


async def test_a_spot_preemption_is_named_so_even_when_its_own_watcher_is_slow(
    host: Reach, remote_home: Path
) -> None:
    # A Spot preemption flips maintenance-event too. On a loaded VM the preemption watcher can lag
    # the maintenance one by more than its one-second head start: the banner must still say preemption.
    metadata = MetadataServer({"instance/preempted": "FALSE", "instance/maintenance-event": "NONE"})
    address = await metadata.start("127.0.0.1")
    frozen: psutil.Process | None = None
    try:
        runner = make_runner(
            remote_home, command=TRAPPER,
            env={"GCE_METADATA_HOST": address, "GCPTUI_METADATA_FETCHER": "curl"},
        )  # fmt: skip
        started = await runner.start(host)
        pgid = started.pgid
        assert pgid is not None

        def polls() -> list[str]:
            return [c for c in watcher_processes(pgid) if "wait_for_change" in c]

        await wait_for(lambda: _true(len(polls()) == 2), what="both notice watchers' long polls")
        frozen = _watcher_of(pgid, "instance/preempted")
        frozen.suspend()  # the preemption watcher is starved of CPU
        await metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        await metadata.set("instance/preempted", "TRUE")
        log = remote_home / ".gcptui/job/output.log"
        await wait_for(lambda: _true("from the metadata server" in log.read_text()), what="the notice banner")
        frozen.resume()
        frozen = None
        ended = await finished(runner, host)
        assert (ended.state, ended.exit_code, ended.detail) == ("exited", 0, "preempted")
        banners = [line for line in log.read_text().splitlines() if "from the metadata server" in line]
        assert len(banners) == 1 and "preemption notice from the metadata server" in banners[0], banners
    finally:
        if frozen is not None:
            frozen.resume()
        await metadata.close()


async def test_a_vm_going_down_names_the_end_a_preemption_when_the_job_hears_the_term_first(
    host: Reach, remote_home: Path
) -> None:
    # A VM going down SIGTERMs its processes one by one: the job can trap its TERM and exit, and the
    # supervisor can tell the notice watchers to stop, before the watchers got their own TERM or the
    # answer to their long poll. The supervisor's TERM must still end in one last read of the flag.
    metadata = MetadataServer({"instance/preempted": "FALSE", "instance/maintenance-event": "NONE"})
    address = await metadata.start("127.0.0.1")
    try:
        runner = make_runner(
            remote_home, command=TRAPPER,
            env={"GCE_METADATA_HOST": address, "GCPTUI_METADATA_FETCHER": "curl"},
        )  # fmt: skip
        started = await runner.start(host)
        pgid = started.pgid
        assert pgid is not None
        await wait_for(lambda: _true(sum("wait_for_change" in c for c in watcher_processes(pgid)) == 2),
                       what="both notice watchers' long polls")  # fmt: skip
        # GCE has flipped the flag; the long polls' answers have not reached the watchers yet.
        metadata.values["instance/preempted"] = "TRUE"
        for pid in [pgid, *_trainers(pgid)]:  # the supervisor and the job, not the watchers
            os.kill(pid, signal.SIGTERM)
        ended = await finished(runner, host)
        assert (ended.state, ended.exit_code, ended.detail) == ("exited", 0, "preempted")
        assert ended.preempted_at is not None
        assert (remote_home / "term.txt").read_text() == "got-term\n"
        log = (remote_home / ".gcptui/job/output.log").read_text()
        assert "preemption notice from the metadata server" in log
        assert group_members(pgid) == []
    finally:
        await metadata.close()


def _trainers(pgid: int) -> list[int]:
    """The job's own processes in the group: the shell running TRAPPER."""
    found = []
    for pid in group_members(pgid):
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
            # The supervisor and its watcher subshells carry the command in their arguments too.
            if "got-term" in cmdline and "gcptui-job" not in cmdline:
                found.append(pid)
        except psutil.Error:
            continue
    assert found, "the job's shell is not running"
    return found


def _watcher_of(pgid: int, path: str) -> psutil.Process:
    """The notice watcher subshell whose fetch is long-polling ``path``."""
    for pid in group_members(pgid):
        try:
            fetch = psutil.Process(pid)
            if path in " ".join(fetch.cmdline()):
                return fetch.parent()  # type: ignore[return-value]
        except psutil.Error:
            continue
    raise AssertionError(f"no watcher is fetching {path}")
