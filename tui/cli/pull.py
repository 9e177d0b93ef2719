"""`gcptui pull NAME REMOTE_PATH [LOCAL_DIR] [--force]`: results back to the laptop.

From the machine over its exec channel when it runs (SFTP over SSH); from the checkpoint bucket
(`[storage] bucket`) when it is stopped or gone. A rich progress bar on a terminal, one summary line.
The copying itself is remote/transfer/results.py, shared with the TUI's pull key.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
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

from gcptui.remote.errors import ConfigError
from gcptui.remote.safe_text import one_line
from gcptui.remote.services import Services
from gcptui.remote.transfer.pull import PullResult
from gcptui.remote.transfer.results import bucket_urls, kept_line, pull_results, sftp_path, summary_line
from gcptui.tui.cli.common import with_services


def run_pull(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    local_dir = Path(args.local_dir or ".").expanduser()
    try:  # before anything is fetched: a LOCAL_DIR that cannot hold files is the user's to fix
        local_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot use {local_dir} as LOCAL_DIR: {error.strerror}") from None

    async def body(services: Services) -> int:
        (instance,) = await services.resolve([args.name])
        remote = sftp_path(args.remote_path, services.config.sync.dest)
        shown = one_line(f"{instance.name}:{remote}")
        with _bar(err) as bar:
            task = bar.add_task(shown, total=None)

            def planned(files: int, size: int) -> None:
                bar.update(task, total=size, description=f"{shown} ({files} files)")

            def progress(n: int) -> None:
                bar.advance(task, n)

            try:
                source, result = await pull_results(
                    partial(services.channel, instance), instance, remote, local_dir,
                    bucket_urls=bucket_urls(services.config, instance.name),
                    force=args.force, planned=planned, progress=progress,
                )  # fmt: skip
            except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError) as error:
                if error.filename is None:
                    raise
                # A local path in the way (a file where a folder goes, or the reverse): nothing of
                # it was overwritten; what came before it stays, and a pull again resumes.
                raise ConfigError(
                    f"cannot write {error.filename}: {error.strerror}: move it away or pick another LOCAL_DIR"
                ) from None
        _summary(err, source, local_dir, result)
        return 0

    return with_services(args, body)


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    )  # fmt: skip


def _summary(console: Console, source: str, local_dir: Path, result: PullResult) -> None:
    console.print(summary_line(source, local_dir, result), highlight=False, markup=False, soft_wrap=True)
    if kept := kept_line(result):
        console.print(kept, style="yellow", highlight=False, markup=False, soft_wrap=True)
    sys.stderr.flush()
