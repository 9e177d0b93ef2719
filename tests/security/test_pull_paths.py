"""Paths from a VM (or the bucket any VM writes) are data: a pull lands inside its folder whatever
the names, links planted on the laptop are not written through, and a compressed object is never
expanded past its declared size (real OpenSSH sshd over SFTP, fake-gcs-server)."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.sweep.report import write_report
from gcptui.remote.transfer.bucket import pull_from_bucket
from gcptui.remote.transfer.pull import PullError, local_base
from tests.cli.test_pull import config_for
from tests.helpers.gcs import FakeGcs
from tests.helpers.sshd import Sshd

ROOT = Path(__file__).resolve().parents[2]


def _pull(config: str, remote: str, local: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "pull", "box", remote, str(local), "--config", config],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _vm_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "vm" / "runs"  # sshd runs here: the VM's files are this machine's
    for name in ("x", "other-vm"):
        (runs / name / "checkpoints").mkdir(parents=True)
        (runs / name / "checkpoints" / "s.pt").write_bytes(name.encode())
    return runs


def test_a_run_folder_named_dot_dot_never_lands_beside_its_folder(sshd: Sshd, tmp_path: Path) -> None:
    """A checkpoint path `runs/x/..` (the VM's word) once pulled into `pulled/VM/..`, over another
    VM's results: now it is normalised (`runs`) and lands inside `pulled/VM`, and a name that stays
    `..` or empty (`~/..`, `/`) is refused before anything is listed."""
    runs = _vm_runs(tmp_path)
    pulled = tmp_path / "laptop" / "pulled"
    (pulled / "other-vm").mkdir(parents=True)
    (pulled / "other-vm" / "mine.txt").write_text("mine\n")
    result = _pull(config_for(sshd, tmp_path), f"{runs}/x/..", pulled / "box")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in pulled.iterdir()) == ["box", "other-vm"]
    assert [p.name for p in (pulled / "other-vm").iterdir()] == ["mine.txt"]
    assert (pulled / "box" / "runs" / "other-vm" / "checkpoints" / "s.pt").read_bytes() == b"other-vm"
    for remote in ("..", "/", "runs/.", "a/\x1b]0;t\x07"):
        with pytest.raises(PullError, match="cannot name a folder"):
            local_base(pulled / "box", remote)


def test_links_planted_on_the_laptop_are_not_written_through(sshd: Sshd, tmp_path: Path) -> None:
    runs = _vm_runs(tmp_path)
    config = config_for(sshd, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    local = tmp_path / "laptop"
    (local / "x").mkdir(parents=True)
    (local / "x" / "checkpoints").symlink_to(elsewhere)  # a folder on the way leads out
    result = _pull(config, f"{runs}/x", local)
    assert result.returncode != 0 and "leads out of" in result.stderr, result.stderr
    assert list(elsewhere.iterdir()) == []

    # A part file that is a link to a file of the user's: replaced, never written through.
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (local / "x" / "checkpoints").unlink()
    (local / "x" / "checkpoints").mkdir()
    (local / "x" / "checkpoints" / ".s.pt.gcptui-part").symlink_to(victim)
    result = _pull(config, f"{runs}/x", local)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "precious\n"
    assert (local / "x" / "checkpoints" / "s.pt").read_bytes() == b"x"


def test_a_gzip_object_is_pulled_as_stored_never_expanded(fake_gcs: FakeGcs, tmp_path: Path) -> None:
    """A 16 MiB object of zeros gzip-encoded is ~16 KiB in the bucket: the pull writes the stored
    bytes (the listed size), not 1000x that, and leaves no part file."""
    fake_gcs.make_bucket("runs")
    blob = fake_gcs.client().bucket("runs").blob("vm-1/demo/bomb.bin")
    blob.content_encoding = "gzip"
    stored = gzip.compress(b"\0" * (16 << 20))
    blob.upload_from_string(stored, content_type="application/octet-stream")
    result = pull_from_bucket("gs://runs/vm-1/demo", tmp_path / "laptop")
    assert result.copied == ["bomb.bin"]
    landed = tmp_path / "laptop" / "demo" / "bomb.bin"
    assert landed.stat().st_size == len(stored) < 1 << 20
    assert [p.name for p in landed.parent.iterdir()] == ["bomb.bin"]


def test_report_files_replace_a_planted_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    from gcptui.remote.sweep.spec import load_sweep
    from gcptui.remote.sweep.state import SweepState
    from tests.security.test_bucket_sweep_state import SWEEP

    (tmp_path / "sweep.toml").write_text(SWEEP)
    spec = load_sweep(tmp_path / "sweep.toml")
    state = SweepState(name=spec.name, spec=spec, created_at=1.0, trials=[])
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "shared"
    out.mkdir()
    (out / "results.csv.part").symlink_to(victim)  # the old fixed part name
    (out / "results.csv").symlink_to(victim)
    written = write_report(state, out)
    assert victim.read_text() == "precious\n"
    assert (out / "results.csv").is_file() and not (out / "results.csv").is_symlink()
    assert not [p for p in out.iterdir() if p.name.endswith(".part") and not p.is_symlink()]
    assert out / "results.csv" in written


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "a\x1b]0;t\x07", "x" * 256])
def test_plain_names_only(name: str) -> None:
    from gcptui.remote.safe_text import plain_name

    assert not plain_name(name)
    assert plain_name("step-000000100.pt") and plain_name("résumé.txt")
