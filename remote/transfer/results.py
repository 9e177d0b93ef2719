"""Results back to the laptop, one code path for `gcptui pull` and the TUI's pull key: from the machine
over its exec channel when it answers (SFTP where that is SSH), else from the checkpoint bucket."""

from __future__ import annotations

import asyncio
import posixpath
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.config import Config
from gcptui.remote.dest_path import in_dest
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import one_line
from gcptui.remote.transfer.bucket import NothingMirrored, pull_from_bucket
from gcptui.remote.transfer.pull import PullResult, pull

PULLED = Path("pulled")  # below the directory gcptui runs in


def sftp_path(remote: str, dest: str) -> str:
    """REMOTE_PATH as SFTP reads it (relative to the remote home): `~/x` and `/x` as written, a
    relative path below `[sync].dest`, the project folder the job runs in."""
    return in_dest(dest, remote)


def bucket_urls(config: Config, name: str) -> list[str]:
    """Where machine ``name``'s runs are mirrored, most likely first: the folder of each group it is a
    node of (a group's jobs mirror to ``<bucket>/<group>``), then its own. Empty without a bucket."""
    groups = [g.name for g in config.groups if name in g.vms]
    urls = [config.storage.checkpoint_url(n) for n in (*groups, name)]
    return [url for url in urls if url is not None]


def mirror_folders(url: str, remote: str) -> list[str]:
    """Where under ``url`` (a ``GCPTUI_CHECKPOINT_URL``) the run folder ``remote`` is mirrored: the
    trainer mirrors to ``<url>/<run folder's name>``; a sweep trial's job gets the sweep's name
    appended to its URL (remote/sweep/vmside.py), so ``<run_root>/<sweep>/tNNN`` is under
    ``<url>/<sweep>/tNNN``."""
    path = remote.rstrip("/")
    name, parent = posixpath.basename(path), posixpath.basename(posixpath.dirname(path))
    if parent and re.fullmatch(r"t\d{3,}", name):
        return [f"{url}/{parent}/{name}", f"{url}/{name}"]
    return [f"{url}/{name}"]


def reachable(instance: Instance) -> bool:
    """Whether the VM itself can be read (a running instance, or a static host: SSH tells)."""
    return instance.state.reachable


async def pull_results(
    channel: Callable[[], ExecChannel],
    instance: Instance,
    remote: str,
    local_dir: Path,
    *,
    bucket_urls: Sequence[str] = (),
    force: bool = False,
    planned: Callable[[int, int], None] = lambda _files, _bytes: None,
    progress: Callable[[int], None] = lambda _n: None,
) -> tuple[str, PullResult]:
    """Copy ``remote`` (an SFTP path, see ``sftp_path``) of ``instance`` into ``local_dir``: from the VM
    over ``channel()`` (asked for only then: a stopped row may have none) when it answers, else from the checkpoint bucket (``bucket_urls``: where the VM's run folders
    may be mirrored, see ``bucket_urls``; the first holding the run is read). Returns the source read
    and what was done.

    From the bucket ``planned`` and ``progress`` are called on a worker thread.
    """
    if reachable(instance):
        result = await pull(channel(), remote, local_dir, force=force, planned=planned, progress=progress)
        return f"{instance.name}:{remote}", result
    if not bucket_urls:
        raise GcptuiError(
            f"{instance.name} is {instance.status}: `gcptui vm start {instance.name}` and pull again "
            "(or set [storage] bucket so runs are in Cloud Storage too)"
        )
    sources = [folder for url in bucket_urls for folder in mirror_folders(url, remote)]
    for source in sources:
        stop = threading.Event()
        try:
            result = await asyncio.to_thread(pull_from_bucket, source, local_dir, force=force,
                                             planned=planned, progress=progress, stop=stop)  # fmt: skip
        except NothingMirrored:
            continue  # not this folder: the next one
        except asyncio.CancelledError:
            # Ctrl-C, a closed screen: the thread cannot be cancelled (and asyncio.run waits for it),
            # so it is told to stop after the range in flight instead of downloading the whole run.
            stop.set()
            raise
        return source, result
    raise GcptuiError(
        f"nothing under {' or '.join(sources)}: the run may never have mirrored a checkpoint there"
    )


def summary_line(source: str, local_dir: Path, result: PullResult) -> str:
    """``box:runs/demo → pulled/box: 6 copied, 1 resumed (12.3 MiB)``."""
    parts = [f"{len(result.copied)} copied"]
    if result.resumed:
        parts.append(f"{len(result.resumed)} resumed")
    if result.complete:
        parts.append(f"{len(result.complete)} already complete")
    if result.vanished:
        parts.append(f"{len(result.vanished)} deleted on the VM meanwhile")
    if result.odd:  # names that cannot be a local file (escaped: a name is the VM's text)
        shown = ", ".join(result.odd[:3]) + (" …" if len(result.odd) > 3 else "")
        parts.append(f"{len(result.odd)} refused for their names ({shown})")
    # The path may be a VM's (a checkpoint's run folder) or pasted from one: shown inert, like the bar.
    return f"{one_line(source)} → {local_dir}: {', '.join(parts)} ({result.bytes_copied / 2**20:.1f} MiB)"


def kept_line(result: PullResult) -> str:
    """The local files left alone because they are newer ("" when none)."""
    if not result.kept:
        return ""
    shown = ", ".join(result.kept[:5]) + (" …" if len(result.kept) > 5 else "")
    return f"kept {len(result.kept)} local file(s) newer than the VM's: {shown} (--force overwrites them)"


def run_dir_of(checkpoint_path: str | None) -> str | None:
    """The run directory a checkpoint's path names (``runs/demo`` for
    ``runs/demo/checkpoints/step-000000100.pt``), or None when it is another layout or unknown."""
    if not checkpoint_path:
        return None
    folder = posixpath.dirname(checkpoint_path)
    if posixpath.basename(folder) != "checkpoints":
        return None  # another script's layout: the checkpoint's folder may not be the run's
    return posixpath.dirname(folder) or None


def local_dir_for(name: str, base: Path = PULLED) -> Path:
    """Where a VM's pulls land: ``pulled/NAME`` (the run directory's name is added below it)."""
    return base / name
