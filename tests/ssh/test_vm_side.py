"""The VM-side supervisor script run directly, for what SSH tests cannot vary: a VM without setsid(1)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gcptui.remote.jobs.protocol import env_file, parse_status
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from tests.helpers.emulator import wait_until
from tests.ssh.conftest import group_members, process_alive

SCRIPT = Path(__file__).parents[2] / "remote" / "vm" / "gcptui-job.sh"


def test_supervisor_detaches_with_python_where_setsid_is_missing(tmp_path: Path) -> None:
    # A PATH with the basic tools and a Python but no setsid, as on macOS under the emulator.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "date", "mv", "cat", "rm", "mkdir", "sleep", "ps", "awk"):
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    (bin_dir / "python3").symlink_to(sys.executable)
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    env = {"HOME": str(home), "PATH": str(bin_dir)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30)

    started = parse_status("local", run("start", "~/project", "sleep 600", "").stdout)
    try:
        assert started.state == "running" and started.pid and started.pgid
        assert os.getsid(started.pgid) == started.pgid  # its own session, detached from ours
        assert os.getpgid(started.pid) == started.pgid
        # 10 s of grace (kill returns once the group is gone): at a load of 4 the 0.5 s it had
        # was sometimes over before the supervisor recorded the SIGTERM, and SIGKILL made it 137.
        killed = parse_status("local", run("kill", "100").stdout)
        assert (killed.state, killed.exit_code) == ("killed", 143)
        assert not process_alive(started.pid) and group_members(started.pgid) == []
    finally:
        if started.pgid and group_members(started.pgid):
            os.killpg(started.pgid, 9)


def _supervisor(home: Path, path: str | None = None) -> Callable[..., subprocess.CompletedProcess[str]]:
    env = {"HOME": str(home), "PATH": path or os.environ["PATH"]}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["dash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
        )

    return run


def _unrelated_group() -> subprocess.Popen[bytes]:
    """A process group of someone else's, standing in for one that got a recycled pgid."""
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def _finished_job(home: Path) -> Path:
    run = _supervisor(home)
    (home / "project").mkdir(parents=True)
    # `true` may have ended by the time start reports: either state is a start.
    assert parse_status("local", run("start", "~/project", "true", "").stdout).state in ("running", "exited")
    wait_until(lambda: parse_status("local", run("status").stdout).state == "exited", timeout=20)
    return home / ".gcptui" / "job"


def test_kill_leaves_alone_the_group_that_got_an_ended_jobs_pgid(tmp_path: Path) -> None:
    job = _finished_job(tmp_path)
    other = _unrelated_group()
    try:
        (job / "pgid").write_text(f"{other.pid}\n")  # what pid recycling does, done by hand
        killed = parse_status("local", _supervisor(tmp_path)("kill", "10").stdout)
        assert (killed.state, killed.exit_code) == ("exited", 0)
        assert other.poll() is None and group_members(other.pid) == [other.pid]
    finally:
        other.kill()
        other.wait()


def test_a_record_of_an_earlier_boot_neither_blocks_a_start_nor_gets_its_pgid_signalled(
    tmp_path: Path,
) -> None:
    job = _finished_job(tmp_path)
    run = _supervisor(tmp_path)
    other = _unrelated_group()
    try:
        # The VM powered off mid-job (no exit code) and came back: the old pgid names someone else now.
        (job / "exit_code").unlink()
        (job / "ended_at").unlink()
        (job / "state").write_text("running\n")
        (job / "boot_id").write_text("00000000-old-boot\n")
        (job / "pgid").write_text(f"{other.pid}\n")
        before = parse_status("local", run("status").stdout)
        assert (before.state, before.detail) == ("killed", "vanished")
        started = run("restart", "10", "~/project", "sleep 600", "")
        status = parse_status("local", started.stdout)
        assert started.returncode == 0 and status.state == "running" and status.pgid != other.pid
        assert other.poll() is None
        run("kill", "5")
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("older_version", [False, True, "pid-and-boot-in-one-line"])
def test_a_lock_left_by_an_earlier_boot_is_taken_over_at_once(
    tmp_path: Path, older_version: bool | str
) -> None:
    (tmp_path / "project").mkdir()
    lock = tmp_path / ".gcptui" / "job" / ".lock"
    lock.mkdir(parents=True)
    alive = subprocess.Popen(["sleep", "300"])  # the old holder's pid names a live process after the reboot
    try:
        if older_version == "pid-and-boot-in-one-line":  # the version just before this one
            (lock / "pid").write_text(f"{alive.pid} 00000000-old-boot\n")
        elif older_version:
            # A version before the boot id went into the lock wrote the pid alone: the lock's age tells.
            (lock / "pid").write_text(f"{alive.pid}\n")
            os.utime(lock, (1_000_000, 1_000_000))
        else:
            (lock / "pid").write_text(f"{alive.pid}\n")
            (lock / "boot").write_text("00000000-old-boot\n")
        started = subprocess.run(
            ["dash", str(SCRIPT), "start", "~/project", "true", ""],
            env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            timeout=30,  # the live holder used to hold it for 120 s, then exit 7
        )
        assert started.returncode == 0 and parse_status("local", started.stdout).state == "running"
    finally:
        alive.kill()
        alive.wait()


def test_a_start_that_cannot_detach_changes_nothing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "dash", "date", "mv", "cat", "rm", "mkdir", "chmod", "sleep", "ps", "awk", "sort"):
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    failed = _supervisor(home, str(bin_dir))("start", "~/project", "true", "")
    assert failed.returncode == 6 and "install util-linux" in failed.stdout
    # It used to read `running` for ever, with no pid to kill.
    assert parse_status("local", _supervisor(home)("status").stdout).state == "none"


def test_a_start_cut_short_before_the_supervisor_recorded_itself_reads_vanished(tmp_path: Path) -> None:
    job = _finished_job(tmp_path)
    for name in ("exit_code", "ended_at", "pid", "pgid"):
        (job / name).unlink()
    (job / "state").write_text("running\n")  # what launch writes before it detaches
    status = parse_status("local", _supervisor(tmp_path)("status").stdout)
    assert (status.state, status.detail) == ("killed", "vanished")


def test_a_supervisor_too_slow_to_start_is_recorded_failed_and_never_runs_the_job(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    done = tmp_path / "supervisor-done"
    home = tmp_path / "home"
    # A setsid slower than the start waits (15 s): the supervisor comes up only once the start has
    # given up and recorded its exit code (a condition, not a race against the start's clock).
    gave_up = home / ".gcptui/job/exit_code"
    (bin_dir / "setsid").write_text(
        f'#!/bin/sh\nwhile [ ! -f {gave_up} ]; do sleep 0.1; done\n"$@"\ntouch {done}\n'
    )
    (bin_dir / "setsid").chmod(0o755)
    (home / "project").mkdir(parents=True)
    ran = tmp_path / "ran"
    started = _supervisor(home, f"{bin_dir}:{os.environ['PATH']}")("start", "~/project", f"touch {ran}", "")
    status = parse_status("local", started.stdout)
    assert (status.state, status.exit_code) == ("exited", 127)
    wait_until(done.exists, timeout=30)
    assert not ran.exists()
    assert parse_status("local", _supervisor(home)("status").stdout).exit_code == 127


@pytest.mark.parametrize("name", ["WANDB-PROJECT", "A; touch /tmp/x; B", ""])
def test_env_file_refuses_what_is_no_variable_name(name: str) -> None:
    # The names are not quoted in the file the supervisor sources (a shell cannot quote them).
    with pytest.raises(ValueError, match="is not a valid environment variable name"):
        env_file({"OK": "1", name: "x"})
    assert env_file({"WANDB_PROJECT": "a b"}) == "export WANDB_PROJECT='a b'\n"


def test_a_sigterm_that_was_no_kill_is_recorded_so_the_job_reads_cut_short(tmp_path: Path) -> None:
    run = _supervisor(tmp_path)
    (tmp_path / "project").mkdir()
    # Like torchrun: exits 1, not 143, on SIGTERM.
    started = parse_status(
        "local", run("start", "~/project", "trap 'exit 1' TERM; sleep 600 & wait", "").stdout
    )
    assert started.state == "running" and started.pgid
    os.killpg(started.pgid, signal.SIGTERM)  # the VM shutting down: SIGTERM to every process
    wait_until(lambda: parse_status("local", run("status").stdout).state == "exited", timeout=20)
    status = parse_status("local", run("status").stdout)
    # It used to read "exited 1" alone: a finished job, which keep-alive never resumes.
    assert (status.exit_code, status.detail) == (1, "terminated")
    assert nothing_to_resume(status) is None
    # A user's kill is no such thing; a new start forgets it.
    started = parse_status("local", run("restart", "10", "~/project", "sleep 600", "").stdout)
    assert started.detail is None
    killed = parse_status("local", run("kill", "10").stdout)
    assert (killed.state, killed.detail) == ("killed", None)


def _start_with_lock_left(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["dash", str(SCRIPT), "start", "~/project", "true", ""],
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=40,  # a lock that is never taken over: exit 7 after 120 s
    )


def test_a_takeover_cut_short_blocks_no_later_operation(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    lock = tmp_path / ".gcptui" / "job" / ".lock"
    # The previous version's lock of a dead holder, and its takeover marker, left by a waiter that died
    # between making it and removing the lock: every later operation waited 120 s, then exit 7.
    (lock / "takeover").mkdir(parents=True)
    (lock / "pid").write_text("999999 00000000-old-boot\n")
    started = _start_with_lock_left(tmp_path)
    assert started.returncode == 0 and parse_status("local", started.stdout).state == "running"


@pytest.mark.parametrize("before_this_boot", [True, False])
def test_a_lock_whose_holder_died_before_writing_its_pid_is_taken_over(
    tmp_path: Path, before_this_boot: bool
) -> None:
    (tmp_path / "project").mkdir()
    lock = tmp_path / ".gcptui" / "job" / ".lock"
    lock.mkdir(parents=True)
    # Made before this boot: taken over at once; made just now: once it is 10 s old.
    stamp = 1_000_000 if before_this_boot else time.time() - 8
    os.utime(lock, (stamp, stamp))
    started = _start_with_lock_left(tmp_path)
    assert started.returncode == 0 and parse_status("local", started.stdout).state == "running"


def test_the_lock_keeps_the_pid_alone_where_an_older_version_reads_it(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    gate = tmp_path / "gate"
    gate.mkdir()
    lock = tmp_path / ".gcptui" / "job" / ".lock"
    # A setup that waits: the start holds the lock until the supervisor records its pgid, which comes
    # after `cd`; a PATH whose setsid waits for the gate keeps the start in launch, holding the lock.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "setsid").write_text(
        f'#!/bin/sh\nwhile [ -d {gate} ]; do sleep 0.05; done\nexec {shutil.which("setsid")} "$@"\n'
    )
    (bin_dir / "setsid").chmod(0o755)
    start = subprocess.Popen(
        ["dash", str(SCRIPT), "start", "~/project", "true", ""],
        env={"HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: (lock / "pid").exists(), timeout=20)
        # An older supervisor reads the whole line as the holder's pid, and took a lock whose "pid"
        # was "PID BOOT_ID" for a dead holder's.
        assert (lock / "pid").read_text() == f"{start.pid}\n"
        assert (lock / "boot").read_text().strip() == Path(
            "/proc/sys/kernel/random/boot_id"
        ).read_text().strip()
    finally:
        gate.rmdir()
        assert start.wait(timeout=30) == 0


def test_a_marker_of_an_earlier_job_says_nothing_about_the_next(tmp_path: Path) -> None:
    run = _supervisor(tmp_path)
    (tmp_path / "project").mkdir()
    started = parse_status(
        "local", run("start", "~/project", "trap 'exit 1' TERM; sleep 600 & wait", "").stdout
    )
    assert started.pgid
    os.killpg(started.pgid, signal.SIGTERM)
    wait_until(lambda: parse_status("local", run("status").stdout).detail == "terminated", timeout=20)
    job = tmp_path / ".gcptui" / "job"
    terminated = (job / "terminated").read_text()
    # An older version's start clears neither marker: the next job, ending well, read "terminated".
    # `true` may have ended by the time start reports: either state is a start.
    assert parse_status("local", run("start", "~/project", "true", "").stdout).state in ("running", "exited")
    wait_until(lambda: parse_status("local", run("status").stdout).state == "exited", timeout=20)
    (job / "terminated").write_text(terminated)
    (job / "killed_by").write_text(f"group-stop\n{started.started_at} {started.pgid}\n")
    status = parse_status("local", run("status").stdout)
    assert (status.exit_code, status.detail) == (0, None)


def test_a_users_kill_after_a_group_stop_leaves_the_job_the_users(tmp_path: Path) -> None:
    run = _supervisor(tmp_path)
    (tmp_path / "project").mkdir()
    assert parse_status("local", run("start", "~/project", "sleep 600", "").stdout).state == "running"
    stopped = parse_status("local", run("kill", "10", "group-stop").stdout)
    assert (stopped.state, stopped.detail) == ("killed", "group-stop")
    # The user gives up on it too: keep-alive, which resumes a group-stop on preemption, must not.
    killed = parse_status("local", run("kill", "10").stdout)
    assert (killed.state, killed.detail) == ("killed", None)
