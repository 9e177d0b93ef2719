"""One set of tests every registered backend passes: its rows, their neutral states, lifecycle,
why a row stopped, recovery, and the exec channel where rows have a shell.

Each backend brings itself up in its emulated form (``RIGS``): GCE through the emulator's REST
server and its asyncssh VMs, static hosts as a real OpenSSH sshd. A new backend adds a rig.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from gcptui.remote.aio import within
from gcptui.remote.compute.backend import Backend, Capability, Recovery, Unsupported
from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.compute.registry import BACKENDS
from gcptui.remote.config import JobConfig, load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.emulator.vertex.jobs import wait_state
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.models import Instance, State, StopCause
from gcptui.remote.services import Services
from gcptui.remote.telemetry.gpu import GpuMonitor
from gcptui.remote.telemetry.log_stream import LogChunk, LogStream
from tests.helpers.sshd import Sshd


@dataclass
class Rig:
    """A backend brought up with one row ``name``; ``take_back`` preempts it (None: it cannot be)."""

    services: Services
    backend: Backend
    name: str
    take_back: Callable[[str], None] | None

    def row(self) -> Instance:
        rows = {r.name: r for r in self.backend.list_rows().rows}
        return rows[self.name]


def gce_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    emu: EmulatorThread = request.getfixturevalue("emulator_thread")
    emu.add_instance("vm-0", spot=True)
    emu.wait_for_status("vm-0", "RUNNING")
    services = Services(load_config(str(emu.write_config(tmp_path / "gcptui.toml"))))
    return Rig(services, services.compute.backends["gce"], "vm-0", emu.preempt)


def hosts_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    server: Sshd = request.getfixturevalue("sshd")
    q = json.dumps
    config = tmp_path / "gcptui.toml"
    config.write_text(
        f"[ssh]\nkey = {q(str(server.client_key))}\nknown_hosts = {q(str(server.known_hosts))}\n\n"
        f'[[hosts]]\nname = "box"\naddress = {q(server.host)}\nport = {server.port}\nuser = {q(server.user)}\n'
    )
    services = Services(load_config(str(config)))
    return Rig(services, services.compute.backends["host"], "box", None)


def tpu_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    """A Spot v4-16 node: two worker hosts, each an SSH server of the emulator."""
    emu: EmulatorThread = request.getfixturevalue("emulator_thread")
    emu.add_tpu("tpu-0", accelerator_type="v4-16", spot=True)
    emu.wait_for_tpu("tpu-0", "READY")
    services = Services(load_config(str(emu.write_config(tmp_path / "gcptui.toml"))))
    return Rig(services, services.compute.backends["tpu"], "tpu-0", emu.preempt_tpu)


def vertex_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    emu: EmulatorThread = request.getfixturevalue("api_emulator")
    config = emu.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[vertex]\nregions = ["us-central1"]\n')
    services = Services(load_config(str(config)))
    backend = services.compute.backends["vertex"]
    container = {"imageUri": "i", "command": ["python3", "-c", "import time; time.sleep(600)"]}
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": container}
    body = {"displayName": "job", "jobSpec": {"workerPoolSpecs": [pool]}}
    created = backend.rest().create_job("us-central1", body)  # type: ignore[attr-defined]
    job = emu.emulator.vertex.jobs[created["name"].rsplit("/", 1)[1]]  # type: ignore[union-attr]
    emu.run(wait_state(job, "JOB_STATE_RUNNING"), timeout=30)
    return Rig(services, backend, job.id, None)


def gke_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    """A bare pod on a Spot node of an emulated GKE cluster; taking it back shuts its node down."""
    emu: EmulatorThread = request.getfixturevalue("api_emulator")
    cluster = emu.add_gke_cluster("training", nodes=2)
    spec = {"containers": [{"name": "c", "image": "i", "command": ["sleep", "600"]}]}
    emu.call(
        cluster.create_pod,
        "default",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-0"}, "spec": spec},
    )
    services = Services(load_config(str(emu.write_config(tmp_path / "gcptui.toml"))))
    backend = services.compute.backends["gke"]
    backend.poll_seconds = 0.05  # type: ignore[attr-defined]

    def take_back(name: str) -> None:
        pod = cluster.store.get("pods", "default", name)
        assert pod is not None
        emu.call(cluster.preempt_node, pod["spec"]["nodeName"])

    return Rig(services, backend, "pod-0", take_back)


T = TypeVar("T")
RIGS = {"gce": gce_rig, "host": hosts_rig, "tpu": tpu_rig, "vertex": vertex_rig, "gke": gke_rig}


def test_every_registered_backend_has_a_rig() -> None:
    assert set(RIGS) == set(BACKENDS)


@pytest.fixture(params=sorted(RIGS))
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    made = RIGS[request.param](request, tmp_path)
    try:
        yield made
    finally:
        await made.services.close()


async def in_thread(call: Callable[[], T]) -> T:
    return await asyncio.to_thread(call)


async def test_rows_carry_the_backends_kind_and_a_neutral_state(rig: Rig) -> None:
    listed = await in_thread(rig.backend.list_rows)
    assert listed.errors == ()
    assert {r.source for r in listed.rows} == {rig.backend.kind}
    row = rig.row()
    # Up (or, for a row with no lifecycle such as a static host, not known to be down), with the
    # backend's own word kept beside the neutral state.
    assert row.state.reachable and row.status
    document = row.to_json()
    assert document["state"] == str(row.state) and document["workers"] == [w.to_json() for w in row.workers]
    if Capability.SHELL in rig.backend.capabilities(row):  # each running worker is reachable
        assert all(w.address for w in row.workers if w.state is State.RUNNING)
    assert rig.services.compute.of(row) is rig.backend
    # The watch's cheap listing (keep-alive polls it) names the same rows, of the same kind.
    watched = await in_thread(rig.backend.watch_rows)
    assert {(r.name, r.source) for r in watched.rows} == {(r.name, r.source) for r in listed.rows}
    # The fleet table carries the row once: the fleet listing reads it itself, or the kinds beyond it do.
    table = await in_thread(rig.services.fleet.snapshot)
    assert [(r.name, r.source) for r in table.instances].count((row.name, row.source)) == 1
    assert rig.services.compute.in_fleet_listing(row) is rig.backend.listed_by_fleet


async def test_lifecycle_follows_capabilities(rig: Rig) -> None:
    row = rig.row()
    capable = rig.backend.capabilities(row)
    if Capability.SIMULATE_MAINTENANCE not in capable:  # `vm preempt` asks this, and says so per row
        with pytest.raises(Unsupported, match=f"{row.name} is a {row.source} row: it cannot be sent"):
            rig.backend.simulate_maintenance(row)
    if Capability.STOP not in capable:
        with pytest.raises(Unsupported, match=f"{row.name} is a {row.source} row: it cannot be stopped"):
            rig.backend.stop(row)
        with pytest.raises(Unsupported):
            rig.backend.start(row)
        return
    await in_thread(lambda: rig.backend.stop(row))
    stopped = await in_thread(lambda: rig.backend.get(row))
    assert stopped is not None and stopped.state is State.STOPPED
    assert await in_thread(lambda: rig.backend.why_stopped(stopped)) is StopCause.USER
    batched = await in_thread(lambda: rig.backend.why_stopped_many([stopped]))
    assert {name: stop.cause for name, stop in batched.items()} == {row.name: StopCause.USER}
    await in_thread(lambda: rig.backend.start(stopped))
    running = await in_thread(lambda: rig.backend.get(row))
    assert running is not None and running.state in (State.PROVISIONING, State.RUNNING)
    await in_thread(lambda: rig.backend.delete(row))
    assert await in_thread(lambda: rig.backend.get(row)) is None


async def test_a_preempted_row_says_why_and_recovers(rig: Rig) -> None:
    row = rig.row()
    if rig.take_back is None:
        assert Capability.PREEMPTIBLE not in rig.backend.capabilities(row)
        with pytest.raises(Unsupported):
            rig.backend.recover(row)
        return
    assert {Capability.PREEMPTIBLE, Capability.RECOVER} <= rig.backend.capabilities(row)
    rig.take_back(row.name)

    down = await until_state(rig, State.PREEMPTED)
    assert down.state.down
    assert await in_thread(lambda: rig.backend.why_stopped(down)) is StopCause.PREEMPTED
    # Batched as keep-alive asks each poll: only the causes asked for are looked for.
    found = await in_thread(lambda: rig.backend.why_stopped_many([down], causes=(StopCause.PREEMPTED,)))
    assert [(name, stop.cause) for name, stop in found.items()] == [(row.name, StopCause.PREEMPTED)]
    assert await in_thread(lambda: rig.backend.why_stopped_many([down], causes=(StopCause.USER,))) == {}
    # A row whose disk outlives a stop is started again; another (a Spot TPU node) is made anew.
    expected = (
        Recovery.RESTARTED
        if Capability.DISK_OUTLIVES in rig.backend.capabilities(row)
        else Recovery.RECREATED
    )
    assert await in_thread(lambda: rig.backend.recover(down)) is expected
    assert rig.row().state is State.RUNNING
    assert not rig.row().state.down


async def test_a_cancel_and_cloud_logs_follow_capabilities(rig: Rig) -> None:
    """``K`` and ``l`` ask these: a row that is ``CANCEL`` is stopped by its provider when asked (and
    says the user stopped it); a ``CLOUD_LOGS`` row has its lines in Cloud Logging, not on a machine."""
    row = rig.row()
    capable = rig.backend.capabilities(row)
    assert rig.services.compute.can(row, Capability.CANCEL) is (Capability.CANCEL in capable)
    if Capability.CLOUD_LOGS in capable:
        assert Capability.SHELL not in capable
    if Capability.CANCEL not in capable:
        with pytest.raises(Unsupported, match=f"{row.name} is a {row.source} row: it cannot be cancelled"):
            rig.backend.cancel(row)
        return
    await in_thread(lambda: rig.backend.cancel(row))
    stopped = await until_state(rig, State.STOPPED)
    assert await in_thread(lambda: rig.backend.why_stopped(stopped)) is StopCause.USER


async def until_state(rig: Rig, state: State, timeout: float = 20.0) -> Instance:
    """The rig's row once its listing reads ``state`` (polled; the provider records it when it will)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        row = await in_thread(rig.row)
        if row.state is state:
            return row
        assert asyncio.get_running_loop().time() < deadline, f"{row.name} stayed {row.state}, not {state}"
        await asyncio.sleep(0.05)


async def test_the_exec_channel_runs_a_process_with_stdin_stdout_stderr_and_status(rig: Rig) -> None:
    row = rig.row()
    if Capability.SHELL not in rig.backend.capabilities(
        row
    ):  # a Vertex AI job: no process of ours runs there
        with pytest.raises(Unsupported):
            rig.backend.exec_channel(row)
        return
    channel = rig.backend.exec_channel(row)
    result = await channel.run("cat; echo oops >&2; exit 3", input=b"hello\n", timeout=30)
    assert (result.exit_status, result.stdout, result.stderr, result.ok) == (3, b"hello\n", b"oops\n", False)
    assert channel.where not in ("", "?")

    process = await channel.start('read line; echo "got $line"')
    try:
        process.stdin.write(b"ping\n")
        await process.stdin.drain()
        assert await process.stdout.readline() == b"got ping\n"
    finally:
        process.close()


async def test_a_job_starts_reports_its_status_and_is_killed_over_the_exec_channel(
    rig: Rig, tmp_path: Path
) -> None:
    """The job supervisor and the watchers speak only stdin/stdout, so they run unchanged over every
    backend's channel (SSH to a VM, a host, a TPU worker; Kubernetes exec into a pod)."""
    row = rig.row()
    if Capability.SHELL not in rig.backend.capabilities(row):
        return  # no process of ours runs there (the channel's own test says so)
    # Every rig's machines run on this machine: one private home keeps the run apart from others.
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    runner = JobRunner(
        JobConfig(command="echo up here; exec sleep 600", stop_grace_seconds=2.0),
        "~/project",
        remote_home=str(home),
    )
    machine = Reach(row.name, rig.backend.exec_channel(row))

    started = await runner.start(machine)
    assert (started.name, started.state) == (row.name, "running")
    async with aclosing(runner.watch(machine)) as events:
        first = await within(30, anext(events))
    assert first.kind == "state" and first.status is not None and first.status.pid == started.pid
    killed = await runner.kill(machine)
    assert (killed.state, killed.exit_code) == ("killed", 143)
    assert (await runner.status(machine)).state == "killed"

    # The log follower and the GPU monitor over the same channel (no nvidia-smi here: "no GPU", or a
    # TPU worker's chips from its tpu-info).
    log = str(home / ".gcptui/job/output.log")
    lines = [line for e in [e async for e in LogStream(machine.channel, log, follow=False)]
             if isinstance(e, LogChunk) for line in e.lines]  # fmt: skip
    assert "up here" in lines
    async with aclosing(GpuMonitor(machine.channel, nvidia_smi=str(tmp_path / "none")).snapshots()) as gpus:
        snapshot = await within(30, anext(gpus))
        assert snapshot.state == "no_gpu" or (snapshot.state == "ok" and snapshot.gpus)
