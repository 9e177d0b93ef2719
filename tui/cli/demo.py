"""``gcptui emulator`` and ``gcptui demo``: the product on a local emulated fleet, no cloud account."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gcptui.remote.errors import ConfigError

DEMO_BANNER = "DEMO: emulated VMs, no cloud"


def _local_storage(directory: Path, stack: contextlib.ExitStack) -> tuple[str, str] | None:
    """fake-gcs-server with the demo's bucket when it and the storage client are installed, stopped
    when ``stack`` closes: (bucket URL, STORAGE_EMULATOR_HOST); None (no mirroring) otherwise."""
    import importlib.util

    from gcptui.remote.emulator.storage import FakeGcsServer, fake_gcs_binary

    binary = fake_gcs_binary()
    if binary is None or importlib.util.find_spec("google.cloud.storage") is None:
        return None
    try:
        server = stack.enter_context(FakeGcsServer(binary, directory / "gcs"))
    except (OSError, RuntimeError):
        return None  # the demo runs on without a bucket; the banner says so
    return server.bucket_url, server.host


def _check_vms(vms: int) -> None:
    if not 1 <= vms <= 64:
        raise ConfigError(f"--vms {vms}: choose between 1 and 64 emulated VMs")


def run_emulator_command(args: argparse.Namespace) -> int:
    from gcptui.remote.emulator.runner import run_emulator

    _check_vms(args.vms)
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gcptui-emulator-"))
    return run_emulator(directory, args.vms, spot_action=args.spot_action)


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


def run_demo(args: argparse.Namespace) -> int:
    """Emulator in a background thread, the TUI on top; quitting removes every trace."""
    from gcptui.remote.config import load_config
    from gcptui.remote.emulator.demo import demo_fleet
    from gcptui.remote.emulator.thread import EmulatorThread
    from gcptui.tui.app import GcptuiApp
    from gcptui.tui.cli.demo_project import write_demo_project

    _check_vms(args.vms)
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
                initial_boot_seconds=0.3,
            ) as emulator,
        ):
            emulator.add_fleet(demo_fleet(args.vms))
            config_path = emulator.write_config(directory / "gcptui.toml")
            storage = _local_storage(directory, stack)
            if storage is not None:  # the laptop side too: `p` pulls from the bucket when a VM is gone
                stack.enter_context(_environment("STORAGE_EMULATOR_HOST", storage[1]))
            project = write_demo_project(directory, config_path, storage)
            config = load_config(config_path)
            banner = f"{DEMO_BANNER} · {'bucket' if storage else 'no bucket'}"
            app = GcptuiApp(config, readonly=args.readonly, demo=True, banner=banner, refresh_seconds=2.0)
            # Where the editable project is (the header): edit a file there and watch it reach the VMs.
            app.sub_title = " · ".join(filter(None, [app.sub_title, f"edit {project}"]))
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
