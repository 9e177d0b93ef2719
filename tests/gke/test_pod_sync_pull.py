"""Sync and pulls reach a GKE pod over Kubernetes exec, as they reach a VM over SSH: the sync agent
runs unchanged in the pod (it speaks only stdin/stdout), and a pull, with no SFTP there, comes
through the pull reader. Against the emulated cluster (pods are local processes)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gcptui.remote.compute.backend import BackendContext
from gcptui.remote.compute.exec_channel import ExecResult
from gcptui.remote.compute.gke.backend import GkeBackend
from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.sync import BatchApplied, SyncSession
from gcptui.remote.transfer.pull import PullResult, pull

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

POD = """
apiVersion: v1
kind: Pod
metadata: {name: box}
spec:
  containers:
  - {name: main, image: trainer, command: ["sh", "-c", "while true; do sleep 0.2; done"]}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GkeBackend]:
    root = tmp_path_factory.mktemp("gke-sync")
    with EmulatorThread(root / "emu", ssh=False) as emu:
        emu.add_gke_cluster("training", "us-central1-a", nodes=1)
        config = emu.write_config(root / "gcptui.toml")
        (root / "pod.yaml").write_text(POD)
        kubectl = ["kubectl", "--kubeconfig", str(emu.kubeconfig)]
        for args in (["apply", "--validate=false", "-f", str(root / "pod.yaml")],
                     ["wait", "pod/box", "--for=condition=Ready", "--timeout=30s"]):  # fmt: skip
            done = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        found = GkeBackend.configured(BackendContext(load_config(config)))
        assert found is not None
        yield found


def test_sync_then_pull_through_a_pods_exec(backend: GkeBackend, tmp_path: Path) -> None:
    (row,) = [r for r in backend.list_rows().rows if r.name == "box"]
    local = tmp_path / "src"
    files = {
        "train.py": b"print('hi')\n",
        "pkg/model.py": b"x = 1\n" * 1000,
        "data/blob.bin": bytes(range(256)) * 8000,
    }
    for name, data in files.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)

    async def go() -> tuple[BatchApplied, BatchApplied, ExecResult, PullResult]:
        channel = backend.exec_channel(row)
        session = SyncSession(local, "project", channel, name="box")
        try:
            first = await session.full_sync(complete=True)
            (local / "train.py").write_bytes(b"print('again')\n")
            second = await session.full_sync(complete=True)
        finally:
            await session.close()
        listed = await channel.run("cd ~/project && find . -type f | sort && cat train.py", timeout=30)
        pulled = await pull(channel, "project", tmp_path / "back")
        return (first, second, listed), pulled, None

    (first, second, listed), pulled, _ = asyncio.run(go())
    assert first.failed == 0 and second.files == 1  # type: ignore[attr-defined]
    assert listed.stdout.decode().split() == [
        "./data/blob.bin",
        "./pkg/model.py",
        "./train.py",
        "print('again')",
    ]  # type: ignore[attr-defined]
    back = tmp_path / "back" / "project"
    assert {str(p.relative_to(back)): p.read_bytes() for p in back.rglob("*") if p.is_file()} == {
        **files,
        "train.py": b"print('again')\n",
    }
    assert sorted(pulled.copied) == sorted(files)
