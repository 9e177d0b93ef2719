"""Shared fixtures: real servers on loopback addresses, never mocks."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.emulator import api_emulator, emulator, emulator_thread
from tests.helpers.gcs import fake_gcs
from tests.helpers.sshd import Sshd, make_client_key, sshd_available
from tests.schema import middleware as schema_check

# The emulators' fixtures (a Compute API with SSH-reachable VMs, Cloud Storage) serve every test folder.
__all__ = ["api_emulator", "emulator", "emulator_thread", "fake_gcs"]

# Keep google-auth from probing a metadata server during tests.
os.environ.setdefault("NO_GCE_CHECK", "true")

# Every emulator a test starts checks each exchange against Google's discovery documents.
schema_check.install()

# Tests press Ctrl-C on the CLI by sending SIGINT to it. A shell that starts pytest in the background
# (`pytest &` in a script) hands it SIGINT ignored, every child inherits that, and Python then leaves
# it ignored: each such test would watch a sweep or a pull run to its end. Children get it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def emulator_speaks_google() -> Iterator[None]:
    """Fail the test during which the emulator (or the product through it) left Google's documents."""
    schema_check.take()  # what an earlier test's stragglers left
    yield
    found = schema_check.take()
    if found:
        shown = "\n".join(f"  {v}" for v in found[:20])
        more = f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""
        pytest.fail(
            f"{len(found)} exchange(s) off Google's discovery documents:\n{shown}{more}", pytrace=False
        )


# Each sshd gets its own 127.0.0.x address so tests can tell hosts apart.
_addresses = (f"127.0.0.{n}" for n in itertools.count(20))


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs with its own empty HOME (so ~/.gcptui, ~/.ssh, ~/.config) and gcloud config:
    what the machine's user has there (a stale job state, keys, a gcloud project) never leaks in,
    and nothing a test writes lands there. Subprocesses inherit it."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))  # sync's saved views, among others
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(home / ".config" / "gcloud"))
    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_client_key(tmp_path_factory.mktemp("client-key"))


@pytest.fixture
def sshd(tmp_path: Path, client_key: Path) -> Iterator[Sshd]:
    """OpenSSH sshd on its own 127.0.0.x address; stopped at the end of the test."""
    if not sshd_available():
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    server = Sshd(directory=tmp_path / "sshd", host=next(_addresses), client_key=client_key)
    server.setup()
    server.start()
    try:
        yield server
    finally:
        server.stop()
