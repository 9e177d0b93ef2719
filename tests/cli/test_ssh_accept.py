"""``gcptui ssh accept``: an unknown host key is trusted only by this deliberate step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.sshd import Sshd

ROOT = Path(__file__).resolve().parents[2]


def gcptui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gcptui.tui", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def config_for(sshd: Sshd, tmp_path: Path, known_hosts: Path) -> str:
    path = tmp_path / "gcptui.toml"
    path.write_text(
        f'[ssh]\nkey = "{sshd.client_key}"\nknown_hosts = "{known_hosts}"\nuser = "{sshd.user}"\n'
        f'[[hosts]]\nname = "box"\naddress = "{sshd.host}"\nport = {sshd.port}\n'
    )
    return str(path)


def test_unknown_key_is_refused_until_accepted(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    config = config_for(sshd, tmp_path, known)

    refused = gcptui("job", "status", "box", "--config", config)
    assert refused.returncode == 1
    assert "is not known" in refused.stderr and "gcptui ssh accept box" in refused.stderr

    assert gcptui("ssh", "accept", "box", "--config", config).returncode == 2  # no terminal, no --yes
    accepted = gcptui("ssh", "accept", "box", "--yes", "--config", config)
    assert accepted.returncode == 0, accepted.stderr
    assert "SHA256:" in accepted.stderr
    assert f"[{sshd.host}]:{sshd.port} ssh-ed25519" in known.read_text()

    # Trusted now: the status call gets through (the test sshd's sessions have their own empty HOME).
    status = gcptui("job", "status", "box", "--json", "--config", config)
    assert status.returncode == 0, status.stderr
    [record] = json.loads(status.stdout)
    assert record["name"] == "box" and record["state"] == "none"


def test_changed_key_is_refused_even_by_accept(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    other = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    assert other.returncode == 0
    public = (tmp_path / "other.pub").read_text().split()
    known.write_text(f"[{sshd.host}]:{sshd.port} {public[0]} {public[1]}\n")
    config = config_for(sshd, tmp_path, known)

    status = gcptui("job", "status", "box", "--config", config)
    assert status.returncode == 1 and "CHANGED" in status.stderr and "ssh-keygen -R" in status.stderr
    accept = gcptui("ssh", "accept", "box", "--yes", "--config", config)
    assert accept.returncode == 1 and "CHANGED" in accept.stderr
    assert known.read_text().count("\n") == 1  # nothing added
