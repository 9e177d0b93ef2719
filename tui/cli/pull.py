"""`gcptui pull NAME REMOTE_PATH [LOCAL_DIR] [--force]`: results back to the laptop.

From the VM over the pooled SSH connection when it runs; from the checkpoint bucket
(`[storage] bucket`) when it is stopped or gone. A rich progress bar on a terminal, one summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import posixpath
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance
from gcptui.remote.services import Services
from gcptui.remote.transfer.bucket import pull_from_bucket
from gcptui.remote.transfer.pull import PullResult, pull
from gcptui.tui.cli.common import with_services


def sftp_path(remote: str, dest: str) -> str:
    """REMOTE_PATH as SFTP reads it (relative to the remote home): `~/x` and `/x` as written, a
    relative path below `[sync].dest`, the project folder the job runs in."""
    if remote.startswith("/"):
        return remote
    if remote == "~" or remote.startswith("~/"):
        return remote[2:] or "."
    base = dest[2:] if dest.startswith("~/") else dest
    return posixpath.normpath(posixpath.join(base, remote))


def run_pull(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    local_dir = Path(args.local_dir or ".").expanduser()

    async def body(services: Services) -> int:
        (instance,) = await services.resolve([args.name])
        remote = sftp_path(args.remote_path, services.config.sync.dest)
        with _bar(err) as bar:
            task = bar.add_task(f"{instance.name}:{remote}", total=None)

            def planned(files: int, size: int) -> None:
                bar.update(task, total=size, description=f"{instance.name}:{remote} ({files} files)")

            def progress(n: int) -> None:
                bar.advance(task, n)

            if _reachable(instance):
                source = f"{instance.name}:{remote}"
                result = await pull(services.getter(instance), remote, local_dir, force=args.force,
                                    planned=planned, progress=progress)  # fmt: skip
            else:
                url = services.config.storage.checkpoint_url(instance.name)
                if url is None:
                    raise GcptuiError(
                        f"{instance.name} is {instance.status}: `gcptui vm start {instance.name}` and pull again "
                        "(or set [storage] bucket so runs are in Cloud Storage too)"
                    )
                source = f"{url}/{posixpath.basename(remote.rstrip('/'))}"
                result = await asyncio.to_thread(pull_from_bucket, source, local_dir, force=args.force,
                                                 planned=planned, progress=progress)  # fmt: skip
        _summary(err, source, local_dir, result)
        return 0

    return with_services(args, body)


def _reachable(instance: Instance) -> bool:
    return instance.source == "host" or instance.status == "RUNNING"


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    )  # fmt: skip


def _summary(console: Console, source: str, local_dir: Path, result: PullResult) -> None:
    parts = [f"{len(result.copied)} copied"]
    if result.resumed:
        parts.append(f"{len(result.resumed)} resumed")
    if result.complete:
        parts.append(f"{len(result.complete)} already complete")
    mib = result.bytes_copied / 2**20
    console.print(
        f"{source} → {local_dir}: {', '.join(parts)} ({mib:.1f} MiB)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if result.kept:
        shown = ", ".join(result.kept[:5]) + (" …" if len(result.kept) > 5 else "")
        console.print(
            f"kept {len(result.kept)} local file(s) newer than the VM's: {shown} (--force overwrites them)",
            style="yellow", highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    sys.stderr.flush()
