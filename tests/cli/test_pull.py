"""`gcptui pull`: results back from a VM over SFTP (OpenSSH sshd), resumable, never clobbering; from
the bucket (fake-gcs-server) when the VM is gone."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.config import SshConfig
from gcptui.remote.errors import GcptuiError
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget
from gcptui.remote.transfer.bucket import CHUNK, PullStopped, pull_from_bucket
from gcptui.remote.transfer.pull import PART_SUFFIX, PullError, pull
from gcptui.remote.transfer.results import summary_line
from tests.helpers.gcs import FakeGcs
from tests.helpers.sshd import Sshd

ROOT = Path(__file__).resolve().parents[2]


def gcptui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gcptui.tui", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})  # fmt: skip


def run_tree(root: Path) -> dict[str, bytes]:
    """A run directory: checkpoints of a few MB beside small files."""
    files = {
        "metrics.jsonl": b'{"step": 1}\n' * 500,
        "checkpoints/step-000000100.pt": os.urandom(3 * 2**20 + 17),
        "checkpoints/step-000000100.json": b'{"step": 100}',
        "checkpoints/step-000000200.pt": os.urandom(5 * 2**20),
        "artifacts/best.pt": os.urandom(123_457),
        "empty.txt": b"",
    }
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return files


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def config_for(sshd: Sshd, tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "gcptui.toml"
    path.write_text(
        f'[ssh]\nkey = "{sshd.client_key}"\nknown_hosts = "{sshd.known_hosts}"\nuser = "{sshd.user}"\n'
        f'[[hosts]]\nname = "box"\naddress = "{sshd.host}"\nport = {sshd.port}\n{extra}'
    )
    return str(path)


def test_pull_copies_a_run_directory_whole_and_says_what_it_did(sshd: Sshd, tmp_path: Path) -> None:
    remote = tmp_path / "vm" / "runs" / "demo"  # sshd runs here: the VM's files are this machine's
    files = run_tree(remote)
    local = tmp_path / "laptop"
    result = gcptui("pull", "box", str(remote), str(local), "--config", config_for(sshd, tmp_path))
    assert result.returncode == 0, result.stderr
    assert tree(local / "demo") == files
    assert f"box:{remote} → {local}: 6 copied" in result.stderr
    mtime = int((remote / "artifacts/best.pt").stat().st_mtime)
    assert int((local / "demo/artifacts/best.pt").stat().st_mtime) == mtime  # the VM's times kept

    again = gcptui("pull", "box", str(remote), str(local), "--config", config_for(sshd, tmp_path))
    assert again.returncode == 0 and "0 copied, 6 already complete" in again.stderr


def test_pull_never_overwrites_a_newer_local_file_without_force(sshd: Sshd, tmp_path: Path) -> None:
    remote = tmp_path / "vm" / "demo"
    run_tree(remote)
    local = tmp_path / "laptop"
    config = config_for(sshd, tmp_path)
    assert gcptui("pull", "box", str(remote), str(local), "--config", config).returncode == 0
    edited = local / "demo" / "metrics.jsonl"
    edited.write_bytes(b"my notes\n")  # changed here after the pull: newer than the VM's
    kept = gcptui("pull", "box", str(remote), str(local), "--config", config)
    assert kept.returncode == 0 and edited.read_bytes() == b"my notes\n"
    assert "kept 1 local file(s) newer than the VM's: metrics.jsonl (--force overwrites them)" in kept.stderr
    forced = gcptui("pull", "box", str(remote), str(local), "--force", "--config", config)
    assert forced.returncode == 0 and edited.read_bytes() == (remote / "metrics.jsonl").read_bytes()


async def test_an_interrupted_pull_resumes_without_resending_complete_files(
    sshd: Sshd, tmp_path: Path
) -> None:
    remote = tmp_path / "vm" / "demo"
    files = run_tree(remote)
    local = tmp_path / "laptop"
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())
    try:
        landed = 0

        def cut_after_4_mib(n: int) -> None:
            nonlocal landed
            landed += n
            if landed >= 4 * 2**20:
                raise ConnectionError("the link dropped")  # as a dead Wi-Fi would, mid-transfer

        with pytest.raises(ConnectionError):
            await pull(
                SshExecChannel(pool.getter(target), lambda: "box"),
                str(remote),
                local,
                progress=cut_after_4_mib,
            )
        parts = list(local.rglob(f"*{PART_SUFFIX}"))
        assert parts, "a partial file is kept for the next pull"
        assert not any(p.name.endswith(".pt") and p.stat().st_size != len(files[str(p.relative_to(local / "demo"))])
                       for p in (local / "demo").rglob("*.pt"))  # fmt: skip  # nothing half-written in place

        sent: list[int] = []
        result = await pull(
            SshExecChannel(pool.getter(target), lambda: "box"), str(remote), local, progress=sent.append
        )
        assert tree(local / "demo") == files
        assert result.resumed and sum(sent) < sum(len(d) for d in files.values()) - 2**20
        assert set(result.complete) | set(result.copied) | set(result.resumed) == set(files)
        assert not list(local.rglob(f"*{PART_SUFFIX}"))
    finally:
        await pool.close()


def test_pull_of_a_missing_path_is_one_line(sshd: Sshd, tmp_path: Path) -> None:
    result = gcptui(
        "pull", "box", str(tmp_path / "nope"), str(tmp_path / "l"), "--config", config_for(sshd, tmp_path)
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "does not exist on the VM" in result.stderr


def test_pull_falls_back_to_the_bucket_when_the_vm_is_stopped(
    emulator_thread,
    fake_gcs: FakeGcs,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    emulator_thread.add_instance("vm-1", "us-central1-a", spot=True, status="TERMINATED")
    fake_gcs.make_bucket("team-runs")
    bucket = fake_gcs.client().bucket("team-runs")
    bucket.blob("x/vm-1/demo/checkpoints/step-000000100.pt").upload_from_string(b"weights" * 1000)
    bucket.blob("x/vm-1/demo/latest.json").upload_from_string(b'{"step": 100}')
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[storage]\nbucket = "gs://team-runs/x"\n')
    local = tmp_path / "laptop"
    result = gcptui("pull", "vm-1", "runs/demo", str(local), "--config", str(config), env=fake_gcs.env())
    assert result.returncode == 0, result.stderr
    assert (local / "demo/checkpoints/step-000000100.pt").read_bytes() == b"weights" * 1000
    assert "gs://team-runs/x/vm-1/demo → " in result.stderr

    config.write_text(config.read_text().replace('bucket = "gs://team-runs/x"', 'bucket = ""'))
    refused = gcptui("pull", "vm-1", "runs/demo", str(local), "--config", str(config), env=fake_gcs.env())
    assert refused.returncode == 1 and "vm-1 is TERMINATED: `gcptui vm start vm-1`" in refused.stderr


def test_a_group_node_pulls_from_the_groups_folder_in_the_bucket(
    emulator_thread,
    fake_gcs: FakeGcs,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    for name in ("n0", "n1"):
        emulator_thread.add_instance(name, "us-central1-a", spot=True, status="TERMINATED")
    fake_gcs.make_bucket("team-runs")
    bucket = fake_gcs.client().bucket("team-runs")
    # A group's nodes all mirror to <bucket>/<group> (GCPTUI_CHECKPOINT_URL), not <bucket>/<VM>.
    bucket.blob("x/big/demo/latest.json").upload_from_string(b'{"step": 100}')
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text()
        + '\n[storage]\nbucket = "gs://team-runs/x"\n[[groups]]\nname = "big"\nvms = ["n0", "n1"]\n'
    )
    local = tmp_path / "laptop"
    result = gcptui("pull", "n1", "runs/demo", str(local), "--config", str(config), env=fake_gcs.env())
    assert result.returncode == 0, result.stderr
    assert "gs://team-runs/x/big/demo → " in result.stderr
    assert (local / "demo/latest.json").read_bytes() == b'{"step": 100}'

    bucket.blob("x/n1/solo/latest.json").upload_from_string(b'{"step": 7}')  # n1's own job, alone
    alone = gcptui("pull", "n1", "runs/solo", str(local), "--config", str(config), env=fake_gcs.env())
    assert alone.returncode == 0 and "gs://team-runs/x/n1/solo → " in alone.stderr, alone.stderr

    nothing = gcptui("pull", "n1", "runs/none", str(local), "--config", str(config), env=fake_gcs.env())
    assert nothing.returncode == 1 and nothing.stderr.count("\n") == 1, nothing.stderr
    assert "nothing under gs://team-runs/x/big/none or gs://team-runs/x/n1/none" in nothing.stderr


def test_a_sweep_trial_pulls_from_the_sweeps_folder_in_the_bucket(
    emulator_thread,
    fake_gcs: FakeGcs,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """A trial's job mirrors to <bucket>/<VM>/<sweep> (its URL carries the sweep's name), so its run
    folder <run_root>/<sweep>/t000 is under <bucket>/<VM>/<sweep>/t000, not <bucket>/<VM>/t000."""
    emulator_thread.add_instance("vm-1", "us-central1-a", spot=True, status="TERMINATED")
    fake_gcs.make_bucket("team-runs")
    fake_gcs.client().bucket("team-runs").blob("x/vm-1/lr-bs/t000/latest.json").upload_from_string(b"{}")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[storage]\nbucket = "gs://team-runs/x"\n')
    local = tmp_path / "laptop"
    args = ("pull", "vm-1", "sweeps/lr-bs/t000", str(local), "--config", str(config))
    result = gcptui(*args, env=fake_gcs.env())
    assert result.returncode == 0, result.stderr
    assert "gs://team-runs/x/vm-1/lr-bs/t000 → " in result.stderr
    assert (local / "t000/latest.json").read_bytes() == b"{}"


def test_a_pull_from_the_bucket_without_google_credentials_is_one_line(
    emulator_thread,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)  # the real Cloud Storage, no login here
    emulator_thread.add_instance("vm-1", "us-central1-a", spot=True, status="TERMINATED")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[storage]\nbucket = "gs://team-runs/x"\n')
    result = gcptui("pull", "vm-1", "runs/demo", str(tmp_path / "laptop"), "--config", str(config))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "no Google credentials for Cloud Storage" in result.stderr
    assert "gcloud auth application-default login" in result.stderr


def test_a_local_path_in_the_way_is_one_line_exit_2(sshd: Sshd, tmp_path: Path) -> None:
    remote = tmp_path / "vm" / "demo"
    run_tree(remote)
    config = config_for(sshd, tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    blocked = tmp_path / "laptop" / "demo" / "metrics.jsonl"
    blocked.mkdir(parents=True)  # a folder where the VM's file should land
    for local, force in ((afile, []), (Path("/proc/nope"), []), (tmp_path / "laptop", ["--force"])):
        result = gcptui("pull", "box", str(remote), str(local), *force, "--config", config)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert afile.read_text() == "mine\n" and blocked.is_dir()


def test_a_second_pull_from_the_bucket_takes_what_the_run_mirrored_since(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket("team-runs")
    bucket = fake_gcs.client().bucket("team-runs")
    bucket.blob("vm-1/demo/latest.json").upload_from_string(b'{"step": 100}')
    bucket.blob("vm-1/demo/metrics.jsonl").upload_from_string(b'{"step": 1}\n')
    local = tmp_path / "laptop"
    first = pull_from_bucket("gs://team-runs/vm-1/demo", local)
    assert sorted(first.copied) == ["latest.json", "metrics.jsonl"]

    # The VM came back (keep-alive recreated it), trained on and mirrored again: latest.json names a
    # newer step in as many bytes, and the metrics grew.
    bucket.blob("vm-1/demo/latest.json").upload_from_string(b'{"step": 200}')
    bucket.blob("vm-1/demo/metrics.jsonl").upload_from_string(b'{"step": 1}\n{"step": 2}\n')
    second = pull_from_bucket("gs://team-runs/vm-1/demo", local)
    assert (local / "demo/latest.json").read_bytes() == b'{"step": 200}'
    assert (local / "demo/metrics.jsonl").read_bytes() == b'{"step": 1}\n{"step": 2}\n'
    assert sorted(second.copied) == ["latest.json", "metrics.jsonl"] and not second.kept

    third = pull_from_bucket("gs://team-runs/vm-1/demo", local)
    assert sorted(third.complete) == ["latest.json", "metrics.jsonl"] and not third.copied
    (local / "demo/metrics.jsonl").write_bytes(b"my notes\n")  # edited here since: newer, kept
    fourth = pull_from_bucket("gs://team-runs/vm-1/demo", local)
    assert fourth.kept == ["metrics.jsonl"] and (local / "demo/metrics.jsonl").read_bytes() == b"my notes\n"


async def test_a_resumed_pull_starts_over_when_the_file_changed_on_the_vm(sshd: Sshd, tmp_path: Path) -> None:
    remote = tmp_path / "vm" / "demo"
    remote.mkdir(parents=True)
    model = remote / "last.pt"  # saved again in place each epoch
    model.write_bytes(b"A" * 4 * 2**20)
    local = tmp_path / "laptop"
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())
    try:
        landed = 0

        def cut_after_1_mib(n: int) -> None:
            nonlocal landed
            landed += n
            if landed >= 2**20:
                raise ConnectionError("the link dropped")

        with pytest.raises(ConnectionError):
            await pull(
                SshExecChannel(pool.getter(target), lambda: "box"),
                str(remote),
                local,
                progress=cut_after_1_mib,
            )
        assert (local / "demo" / f".last.pt{PART_SUFFIX}").exists()

        model.write_bytes(b"B" * 4 * 2**20)  # the next epoch's save, as large, while the link was down
        later = int(model.stat().st_mtime) + 5
        os.utime(model, (later, later))
        result = await pull(SshExecChannel(pool.getter(target), lambda: "box"), str(remote), local)
        assert (local / "demo/last.pt").read_bytes() == b"B" * 4 * 2**20
        assert result.copied == ["last.pt"] and not result.resumed
    finally:
        await pool.close()


async def test_a_file_deleted_on_the_vm_during_the_pull_is_skipped_and_said(
    sshd: Sshd, tmp_path: Path
) -> None:
    remote = tmp_path / "vm" / "demo"
    files = run_tree(remote)
    local = tmp_path / "laptop"
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())
    pruned = "checkpoints/step-000000100.pt"

    def prune(_files: int, _bytes: int) -> None:  # listed, not copied yet: the live run prunes it now
        (remote / pruned).unlink()

    try:
        result = await pull(
            SshExecChannel(pool.getter(target), lambda: "box"), str(remote), local, planned=prune
        )
    finally:
        await pool.close()
    del files[pruned]
    assert tree(local / "demo") == files
    assert result.vanished == [pruned] and sorted(result.copied) == sorted(files)
    assert "5 copied, 1 deleted on the VM meanwhile" in summary_line("box:demo", local, result)


async def test_a_connection_lost_mid_pull_is_one_line_and_the_next_pull_resumes(
    sshd: Sshd, tmp_path: Path
) -> None:
    remote = tmp_path / "vm" / "demo"
    files = run_tree(remote)
    local = tmp_path / "laptop"
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())
    # Every error the loop reports (a task whose exception nobody retrieved is one, when collected).
    reported: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _loop, context: reported.append(context["message"])
    )
    try:
        connection = await pool.getter(target)()
        landed = 0

        def drop_after_2_mib(n: int) -> None:
            nonlocal landed
            landed += n
            if landed >= 2 * 2**20:
                connection.abort()  # the VM preempted mid-transfer

        with pytest.raises(
            PullError, match=r"^the connection to the VM was lost .*: pull again, it resumes$"
        ):
            await pull(
                SshExecChannel(pool.getter(target), lambda: "box"),
                str(remote),
                local,
                progress=drop_after_2_mib,
            )
        gc.collect()  # the failed pull's tasks, finalised now: none of them may hold an unseen error
        assert reported == []
        result = await pull(
            SshExecChannel(pool.getter(target), lambda: "box"), str(remote), local
        )  # the pool reconnects
        assert tree(local / "demo") == files and result.resumed
    finally:
        await pool.close()


def test_an_object_deleted_during_a_pull_from_the_bucket_is_one_error(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket("team-runs")
    bucket = fake_gcs.client().bucket("team-runs")
    bucket.blob("vm-1/demo/checkpoints/step-000000100.pt").upload_from_string(b"weights")
    bucket.blob("vm-1/demo/latest.json").upload_from_string(b'{"step": 100}')

    def prune(_files: int, _bytes: int) -> None:  # listed, not downloaded yet: gone now
        bucket.blob("vm-1/demo/checkpoints/step-000000100.pt").delete()

    with pytest.raises(
        GcptuiError,
        match=r"^cannot download gs://team-runs/vm-1/demo/checkpoints/step-000000100.pt: NotFound",
    ):
        pull_from_bucket("gs://team-runs/vm-1/demo", tmp_path, planned=prune)
    assert not list(tmp_path.rglob(f"*{PART_SUFFIX}"))


def test_ctrl_c_stops_a_pull_from_the_bucket(emulator_thread, fake_gcs: FakeGcs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    emulator_thread.add_instance("vm-1", "us-central1-a", spot=True, status="TERMINATED")
    fake_gcs.make_bucket("team-runs")
    bucket = fake_gcs.client().bucket("team-runs")
    for i in range(200):
        bucket.blob(f"x/vm-1/demo/f{i:03d}").upload_from_string(b"w" * 65536)
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[storage]\nbucket = "gs://team-runs/x"\n')
    local = tmp_path / "laptop"
    command = [
        sys.executable,
        "-m",
        "gcptui.tui",
        "pull",
        "vm-1",
        "runs/demo",
        str(local),
        "--config",
        str(config),
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **fake_gcs.env()}, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not (local / "demo").is_dir() or not any((local / "demo").iterdir()):  # downloading now
            assert process.poll() is None and time.monotonic() < deadline, process.stderr
            time.sleep(0.01)  # polling the folder, not waiting for an outcome
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        process.kill()
        process.wait()
    assert len(list((local / "demo").iterdir())) < 200  # it stopped, not downloaded the whole run first


def test_a_stopped_pull_from_the_bucket_resumes_the_same_object_only(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket("team-runs")
    blob = fake_gcs.client().bucket("team-runs").blob("vm-1/demo/last.pt")
    first, second = os.urandom(2 * CHUNK + 99), os.urandom(2 * CHUNK + 99)
    blob.upload_from_string(first)
    part = tmp_path / "demo" / f".last.pt{PART_SUFFIX}"
    stop = threading.Event()

    def stopped_after_a_range() -> None:
        stop.clear()
        with pytest.raises(PullStopped):  # set after the first range, as Ctrl-C would
            pull_from_bucket("gs://team-runs/vm-1/demo", tmp_path, progress=lambda _n: stop.set(), stop=stop)
        assert part.stat().st_size == CHUNK and not (tmp_path / "demo/last.pt").exists()

    stopped_after_a_range()
    resumed = pull_from_bucket("gs://team-runs/vm-1/demo", tmp_path)
    assert resumed.resumed == ["last.pt"] and resumed.bytes_copied == len(first) - CHUNK
    assert (tmp_path / "demo/last.pt").read_bytes() == first and not part.exists()

    (tmp_path / "demo/last.pt").unlink()
    stopped_after_a_range()
    blob.upload_from_string(second)  # saved again since: the part holds the old version's head
    again = pull_from_bucket("gs://team-runs/vm-1/demo", tmp_path)
    assert again.copied == ["last.pt"] and again.bytes_copied == len(second)
    assert (tmp_path / "demo/last.pt").read_bytes() == second and not part.exists()


def test_a_remote_path_that_is_a_link_is_followed(sshd: Sshd, tmp_path: Path) -> None:
    disk = tmp_path / "vm" / "mnt" / "ssd" / "demo"  # the run on the VM's bigger disk...
    files = run_tree(disk)
    runs = tmp_path / "vm" / "project" / "runs"
    runs.mkdir(parents=True)
    (runs / "demo").symlink_to(disk)  # ...linked from the project folder, as the job writes there
    local = tmp_path / "laptop"
    result = gcptui("pull", "box", str(runs / "demo"), str(local), "--config", config_for(sshd, tmp_path))
    assert result.returncode == 0, result.stderr
    assert tree(local / "demo") == files


def test_an_object_name_that_leads_out_of_local_dir_is_refused(fake_gcs: FakeGcs, tmp_path: Path) -> None:
    fake_gcs.make_bucket("team-runs")
    bucket = fake_gcs.client().bucket("team-runs")
    outside = tmp_path / "home" / ".bashrc"
    outside.parent.mkdir()
    outside.write_text("mine\n")
    bucket.blob(f"vm-1/demo/{outside}").upload_from_string(b"evil\n")  # 'demo//tmp/...': an absolute path
    bucket.blob("vm-1/demo/ok.txt").upload_from_string(b"fine\n")
    # Skipped, and said (escaped): the rest of the run still comes.
    result = pull_from_bucket("gs://team-runs/vm-1/demo", tmp_path / "laptop")
    assert outside.read_text() == "mine\n"
    assert result.copied == ["ok.txt"] and len(result.odd) == 1 and str(outside) in result.odd[0]
    assert "1 refused" in summary_line("here", tmp_path / "laptop", result)
