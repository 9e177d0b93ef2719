"""A keep-alive whose lease is out of reach (its Cloud Storage credentials fail): with no keeper ever
known for the bucket it recovers without the lease and says so once; with a keeper known it keeps
deferring, and the TUI (status line, each watched row's cell), `gcptui keepalive` and the webhook say
"recovery paused" with the reason from the first poll on."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.keepalive import keep_alive
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import job_seen_running, outcome
from tests.keeper.test_rows_fence import JOB, start_on_every_worker
from tests.tui.test_fleet_jobs import until
from tests.tui.test_readonly import notices

REASON = "cannot reach gs://runs/u/.gcptui-keeper/lease: no Google credentials for Cloud Storage"


def credentials_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Application Default Credentials on this laptop (the test's own HOME and gcloud config) and
    no storage emulator: the Cloud Storage client cannot be made, as on a laptop whose login expired."""
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)


async def config(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str = ""
) -> Path:
    """A Spot VM ``spot-u`` and a Spot v4-16 TPU node ``tpu-u``, a job that writes steps, a bucket."""
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    emulator.add_instance("spot-u", "us-central1-a", spot=True)
    emulator.add_tpu("tpu-u", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_status("spot-u", "RUNNING")
    await emulator.wait_for_tpu("tpu-u", "READY")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("unreachable lease\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    q = json.dumps
    with path.open("a") as out:
        out.write(f"\n[job]\ncommand = {q(JOB)}\nresume = {q(JOB)}\nstop_grace_seconds = 2\n"
                  f'\n[storage]\nbucket = "gs://runs/u"\n\n[keepalive]\nenabled = true\npoll_seconds = 0.3\n{extra}')  # fmt: skip
    return path


async def test_no_keeper_known_recovers_a_vm_and_a_tpu_node_without_the_lease(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await config(emulator, tmp_path, monkeypatch)
    credentials_fail(monkeypatch)
    services = Services(load_config(str(path)))
    try:
        [vm] = await services.resolve(["spot-u"])
        session = services.sync_session(vm)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(vm))
        await start_on_every_worker(services, "tpu-u")
        app = GcptuiApp(load_config(path), refresh_seconds=0.3)
        told: list[str] = []  # every notification, kept after it fades
        notify = app.notify
        app.notify = lambda message, *a, **k: (told.append(str(message)), notify(message, *a, **k))[1]  # type: ignore[method-assign]
        async with app.run_test(size=(200, 40)) as pilot:
            await until(pilot, lambda: app.lease_standing is not None)
            assert app.lease_standing is not None and app.lease_standing.kind == "unleased"
            await until(pilot, lambda: any("recovering without the lease" in n for n in notices(app)))
            assert "no keeper known" in str(app.fleet_screen.status_line.render())
            keepalive = app.keepalive
            assert keepalive is not None
            await until(
                pilot,
                lambda: job_seen_running(keepalive, "tpu-u") and keepalive.job_seen("spot-u") is not None,
            )
            emulator.preempt("spot-u")
            emulator.preempt_tpu("tpu-u")
            await until(pilot, lambda: outcome(keepalive, "tpu-u") is not None, timeout=120)
            await until(
                pilot,
                lambda: (
                    keepalive.timelines.get("spot-u") is not None
                    and keepalive.timelines["spot-u"].outcome != "recovering"
                ),
                timeout=120,
            )
            assert outcome(keepalive, "tpu-u") == "resumed"
            assert keepalive.timelines["spot-u"].outcome == "resumed"
            # Said once: not a notification per poll.
            assert sum("recovering without the lease" in n for n in told) == 1
            assert "no keeper known" in str(app.fleet_screen.status_line.render())
    finally:
        await services.close()


class Hook(BaseHTTPRequestHandler):
    received: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_a_known_keeper_pauses_recovery_and_every_face_says_why_from_the_first_poll(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Hook.received = []
    path = await config(
        emulator, tmp_path, monkeypatch, f'\n[notify]\nwebhook = "http://127.0.0.1:{server.server_port}/h"\n'
    )
    fake_gcs.make_bucket("runs")
    # A keeper runs for this bucket; this laptop's keep-alive reads its status once (and notes it).
    services = Services(load_config(str(path)))
    keeper = build_service(services, lease="keeper", autostop=False, notices=False, keeper_name="k")
    laptop = build_service(services, autostop=False, notices=False)
    assert keeper.gate is not None and laptop.gate is not None
    try:
        assert await asyncio.to_thread(keeper.gate.check)
        assert not await asyncio.to_thread(laptop.gate.check) and laptop.gate.keeper_live
    finally:
        await laptop.close()
        await keeper.close()
        await services.close()
    # Then this laptop's credentials fail: it cannot tell whether the keeper still recovers.
    credentials_fail(monkeypatch)
    try:
        app = GcptuiApp(load_config(path), refresh_seconds=0.3)
        async with app.run_test(size=(200, 40)) as pilot:
            await until(pilot, lambda: app.lease_standing is not None)
            standing = app.lease_standing
            assert standing is not None and standing.kind == "paused"  # the first standing told
            assert (
                standing.text.startswith(f"recovery paused: {REASON}")
                and ", fix: run `gcloud auth" in standing.text
            )
            await until(pilot, lambda: any(n.startswith("recovery paused:") for n in notices(app)))
            line = str(app.fleet_screen.status_line.render())
            assert line.startswith(f"recovery paused: {REASON}"), line
            await until(pilot, lambda: "spot-u" in app.live and app.live["spot-u"].keepalive is True)
            assert "recovery paused" in app.live["spot-u"].keepalive_text().plain
        # The headless keep-alive: its first lease line says it, and the webhook hears it.
        services = Services(load_config(str(path)))
        lines: list[str] = []
        stop = asyncio.Event()
        run = asyncio.create_task(keep_alive(services, None, lines.append, stop))
        try:
            await eventually(lambda: any(line.startswith("keep-alive lease:") for line in lines), timeout=30)
            await eventually(lambda: any(b["event"] == "lease_paused" for b in Hook.received), timeout=30)
        finally:
            stop.set()
            await run
            await services.close()
        first = next(line for line in lines if line.startswith("keep-alive lease:"))
        assert first.startswith(f"keep-alive lease: recovery paused: {REASON}"), first
        posted = next(b for b in Hook.received if b["event"] == "lease_paused")
        assert REASON in str(posted["text"])
    finally:
        server.shutdown()


async def test_lease_false_recovers_without_asking_anyone(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await config(emulator, tmp_path, monkeypatch, "lease = false\n")
    services = Services(load_config(str(path)))
    try:
        service = build_service(services, autostop=False, notices=False)
        assert service.gate is None and service.keepalive.gate is None  # no lease consulted, nothing paused
        await service.close()
    finally:
        await services.close()


def test_a_bucket_endpoint_that_refuses_is_told_within_a_poll_with_its_fix(tmp_path: Path) -> None:
    """No network to Cloud Storage (a loopback port nobody listens on): each check gives up within
    seconds (not the client's two minutes of retries), then recovers without the lease while no
    keeper is known for the bucket, and pauses once one is."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    from gcptui.remote.keepalive.known_keepers import KnownKeepers
    from gcptui.remote.keepalive.lease import Lease
    from gcptui.remote.keepalive.lease_gate import KeeperStatus, LeaseGate

    with socket.socket() as sock:  # a port bound and closed: connections to it are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = storage.Client(credentials=AnonymousCredentials(), project="p",
                            client_options={"api_endpoint": f"http://127.0.0.1:{port}"})  # fmt: skip
    known = KnownKeepers(tmp_path / "known-keepers.json")
    bucket = "gs://runs/r"
    gate = LeaseGate(Lease(bucket, "laptop:x", b"k" * 32, client=client),
                     KeeperStatus(bucket, b"k" * 32, client=client), "laptop", known=known)  # fmt: skip
    began = time.monotonic()
    assert gate.check() and gate.unleased
    assert time.monotonic() - began < 10  # keep-alive's default poll
    standing = gate.standing()
    assert standing.kind == "unleased" and "no connection to Cloud Storage" in standing.text, standing
    gate.fence()  # nobody to fence off: a recovery goes on
    known.note(bucket, True)  # `keeper deploy` ran for this bucket meanwhile
    assert not gate.check() and not gate.unleased
    assert gate.standing().text.startswith("recovery paused: cannot reach gs://runs/r/.gcptui-keeper/lease: ")
