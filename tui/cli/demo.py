"""``gcptui emulator`` and ``gcptui demo``: the product on a local emulated fleet, no cloud account."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from gcptui.remote.errors import ConfigError

if TYPE_CHECKING:
    from gcptui.remote.emulator.thread import EmulatorThread

DEMO_BANNER = "DEMO: emulated VMs, no cloud"


def _local_storage(directory: Path, stack: contextlib.ExitStack) -> tuple[str, str] | None:
    """fake-gcs-server with the demo's bucket when it and the storage client are installed, stopped
    when ``stack`` closes: (bucket URL, STORAGE_EMULATOR_HOST); None (no mirroring) otherwise."""
    import importlib.util

    from gcptui.remote.emulator.storage.fake_gcs import FakeGcsServer, fake_gcs_binary

    binary = fake_gcs_binary()
    if binary is None or importlib.util.find_spec("google.cloud.storage") is None:
        return None
    try:
        server = stack.enter_context(FakeGcsServer(binary, directory / "gcs"))
    except (OSError, RuntimeError):
        return None  # the demo runs on without a bucket; the banner says so
    return server.bucket_url, server.host


# The VM whose training job the demo starts by itself (a Spot VM: `P` shows a preemption and resume).
TRAINING_VM = "trainer-l4-1"

# With a bucket, one Spot VM of the demo is DELETE-action: `P` on it shows a recovery onto a new VM
# and an empty disk, resumed from the bucket (the others are STOP-action: the disk survives).
DELETE_ACTION_VM = "trainer-h100-1"


def demo_banner(bucket: bool) -> str:
    """The demo's status-line banner: that it is a demo, and whether checkpoints mirror to a bucket."""
    return f"{DEMO_BANNER} · {'bucket' if bucket else 'no bucket'}"


def demo_note(bucket: bool, names: list[str]) -> str:
    """For the header, beside the project's path: which VM a preemption deletes ("" when none)."""
    if bucket and DELETE_ACTION_VM in names:
        return f"P on {DELETE_ACTION_VM}: DELETE-action, recreated from the bucket"
    return ""


def _check_vms(vms: int) -> None:
    if not 1 <= vms <= 64:
        raise ConfigError(f"--vms {vms}: choose between 1 and 64 emulated VMs")


def _check_gke_nodes(nodes: int) -> None:
    if not 0 <= nodes <= 16:
        raise ConfigError(f"--gke-nodes {nodes}: choose 0-16 nodes (0: no GKE cluster)")


def _add_gke_workload(emulator: EmulatorThread, nodes: int) -> None:
    """The demo's small GKE workload, as `gcptui emulator --gke-nodes` has it: a cluster of Spot L4
    nodes and a StatefulSet of the torch-free toy trainer, one pod per node (up to 2)."""
    from gcptui.remote.emulator.demo import gke_trainer_argv

    cluster = emulator.add_gke_cluster("training", "us-central1-a", nodes=nodes)
    emulator.call(cluster.add_statefulset, "trainer", min(2, nodes), gke_trainer_argv())


def run_emulator_command(args: argparse.Namespace) -> int:
    from gcptui.remote.emulator.runner import run_emulator

    _check_vms(args.vms)
    if not 0 <= args.tpus <= 16 or not 1 <= args.tpu_workers <= 64:
        raise ConfigError(
            f"--tpus {args.tpus} --tpu-workers {args.tpu_workers}: choose 0-16 nodes of 1-64 workers"
        )
    _check_gke_nodes(args.gke_nodes)
    if not 0 <= args.preempt_grace <= 120:
        raise ConfigError(f"--preempt-grace {args.preempt_grace:g}: choose 0-120 seconds")
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gcptui-emulator-"))
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--dir {directory} is a file: give a folder (it is made if missing)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot make --dir {directory}: {err.strerror}") from None
    from gcptui.remote.emulator.emulator_ports import EmulatorPorts, claim, ports_in_config
    from gcptui.tui.cli.demo_project import write_demo_project

    with _only_emulator_in(directory):
        asked = args.port is not None
        last = EmulatorPorts.from_base(args.port) if asked else ports_in_config(directory / "gcptui.toml")
        ports, notes = claim(last, asked=asked)
        for note in notes:
            print(f"gcptui emulator: {note}", file=sys.stderr)
        return run_emulator(
            directory,
            args.vms,
            spot_action=args.spot_action,
            tpus=args.tpus,
            tpu_workers=args.tpu_workers,
            gke_nodes=args.gke_nodes,
            ports=ports,
            write_project=write_demo_project,
            preempt_grace_seconds=args.preempt_grace,
        )


@contextlib.contextmanager
def _only_emulator_in(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s lock for the emulator's life: a second emulator on it would rewrite the
    first one's gcptui.toml and API token under the clients using them."""
    import fcntl

    lock = directory / "emulator.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise ConfigError(
                f"{directory} is in use by another emulator (pid {pid}): stop it, or pick another --dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing it releases the lock


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` for the block, the old value (or none) back after it."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def _sweep_run(sweep_file: Path, config_path: Path, directory: Path) -> Iterator[None]:
    """``gcptui sweep run`` of the demo's sweep as a child process (its output in ``sweep.log``),
    interrupted (Ctrl-C's SIGINT, then a kill) when the demo ends."""
    import signal
    import subprocess

    with (directory / "sweep.log").open("ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep_file), "--config", str(config_path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
        )  # fmt: skip
    try:
        yield
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def run_demo(args: argparse.Namespace) -> int:
    """Emulator in a background thread, the TUI on top; quitting removes every trace."""
    from gcptui.remote.config import load_config
    from gcptui.remote.emulator.demo import demo_fleet
    from gcptui.remote.emulator.thread import EmulatorThread
    from gcptui.remote.sweep.state import SWEEPS_ENV
    from gcptui.tui.cli.demo_project import write_demo_project, write_demo_sweep
    from gcptui.tui.cli.demo_start import HeadStart

    _check_vms(args.vms)
    _check_gke_nodes(args.gke_nodes)
    directory = Path(tempfile.mkdtemp(prefix="gcptui-demo-"))
    try:
        with (
            contextlib.ExitStack() as stack,
            # The fleet is up when the demo opens, as a user's would be (a 3 s boot at launch only
            # delayed the first job); starts and creates from the TUI still take a watchable 3 s.
            EmulatorThread(
                directory / "emulator",
                boot_seconds=3.0,
                stop_seconds=2.0,
                preempt_grace_seconds=10.0,
                initial_boot_seconds=0.0,
            ) as emulator,
        ):
            storage = _local_storage(directory, stack)
            specs = demo_fleet(args.vms, delete_action=(DELETE_ACTION_VM,) if storage else ())
            emulator.add_fleet(specs)
            if args.gke_nodes:  # before the config: it names the cluster's kubeconfig context
                _add_gke_workload(emulator, args.gke_nodes)
            config_path = emulator.write_config(directory / "gcptui.toml")
            if storage is not None:  # the Vertex AI workers reach it as the VMs' jobs do
                emulator.emulator.vertex_env["STORAGE_EMULATOR_HOST"] = storage[1]
            project = write_demo_project(directory, config_path, storage)
            # ``[storage] emulator_host``: the laptop side too (`p` pulls from the bucket when a VM is gone).
            config = load_config(config_path)
            banner = demo_banner(storage is not None)
            if args.sweep:
                running = [spec.name for spec in specs if spec.status == "RUNNING"][:3]
                stack.enter_context(_environment(SWEEPS_ENV, str(directory / "sweeps")))
                stack.enter_context(_sweep_run(write_demo_sweep(directory, running), config_path, directory))
                banner += " · sweep: press w"
            # Without --sweep (whose trials take the running VMs) one VM is training from the start.
            training_on = None if args.sweep else TRAINING_VM
            head_start = None
            if training_on is not None and not args.readonly:
                # Started now, the job's trainer imports torch while Textual starts up.
                wait_running = partial(emulator.wait_for_status, status="RUNNING")
                head_start = HeadStart(config, training_on, wait_running).start()
            from gcptui.tui.cli.demo_app import DemoApp  # Textual's import, once the job is on its way

            app = DemoApp(
                config, readonly=args.readonly, demo=True, banner=banner, refresh_seconds=2.0,
                training_on=training_on, head_start=head_start,
            )  # fmt: skip
            # Where the editable project is (the header): edit a file there and watch it reach the VMs.
            note = demo_note(storage is not None, [spec.name for spec in specs])
            app.sub_title = " · ".join(filter(None, [app.sub_title, f"edit {project}", note]))
            app.run()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP): nothing to tell then
        print(
            f"gcptui demo: its project was {directory / 'project'} (removed with the emulated fleet); "
            "`gcptui emulator --dir DIR` keeps a fleet and DIR/project to sync",
            file=sys.stderr,
        )
    return 0
