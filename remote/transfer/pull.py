"""Copy files from a machine to the laptop over its exec channel, resumable, never clobbering.

``pull(channel, remote, local_dir)`` copies a file or a whole directory tree: over SFTP where the
channel is SSH and the server offers it (pipelined ranged reads, several files at once), else
streamed by a small reader on the machine over the plain exec channel (``exec_pull.py``: a GKE pod's
Kubernetes exec, an sshd without SFTP). Either way files land as ``landing.py`` says: part files
renamed into place, resumable, a newer local file kept unless ``force``.

Over SFTP, fast where it matters: several files are copied at once and each file's reads are pipelined (a
window of requests in flight), so many small files are not one round trip each and a large file
streams at the link's speed.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import asyncssh

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.safe_text import one_line, plain_name
from gcptui.remote.transfer.exec_pull import pull_over_exec
from gcptui.remote.transfer.landing import (  # noqa: F401 - PART_SUFFIX, PullResult, local_base: this module's API too
    MAX_ODD,
    PART_SUFFIX,
    Progress,
    PullError,
    PullResult,
    RemoteFile,
    clamp_mtime,
    inside,
    local_base,
    open_part,
    part_path,
    plan_pull,
)

BLOCK = 1024 * 1024  # asyncssh splits a read into the server's largest requests, in parallel
WINDOW = 8  # reads in flight per file
FILES_AT_ONCE = 8


async def list_remote(
    sftp: asyncssh.SFTPClient, remote: str, odd: list[str] | None = None
) -> list[RemoteFile]:
    """Every regular file at or below ``remote`` (links below it are not followed: they may point
    anywhere; ``remote`` itself is, as the user named it: a run folder linked to a bigger disk).

    Names are the VM's: one that could not name a local file as is (a control or escape sequence,
    ``..``, a separator, over 255 bytes) is skipped, and listed escaped in ``odd``."""
    try:
        attrs = await sftp.stat(remote)
    except asyncssh.SFTPNoSuchFile:
        raise PullError(
            f"{remote} does not exist on the VM: check the path (`gcptui ssh NAME -- ls`)"
        ) from None
    except asyncssh.SFTPError as exc:
        raise PullError(f"cannot read {remote} on the VM: {one_line(exc.reason)}") from None
    mode = attrs.permissions or 0
    if stat.S_ISREG(mode):
        return [RemoteFile(remote, "", attrs.size or 0, clamp_mtime(attrs.mtime))]
    if not stat.S_ISDIR(mode):
        raise PullError(f"{remote} on the VM is neither a file nor a directory")
    found: list[RemoteFile] = []
    folders = [(remote, "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            entries = await sftp.readdir(folder)
        except asyncssh.SFTPNoSuchFile:
            continue  # removed on the VM while it was listed
        except asyncssh.SFTPConnectionLost:
            raise
        except asyncssh.SFTPError as exc:
            raise PullError(f"cannot read {folder} on the VM: {one_line(exc.reason)}") from None
        for entry in entries:
            name = (
                entry.filename if isinstance(entry.filename, str) else entry.filename.decode(errors="replace")
            )
            if name in (".", ".."):
                continue
            if not plain_name(name):
                if odd is not None and len(odd) < MAX_ODD:
                    odd.append(ascii(posixpath.join(prefix, name) if prefix else name)[:200])
                continue
            kind = entry.attrs.permissions or 0
            path, relative = posixpath.join(folder, name), posixpath.join(prefix, name) if prefix else name
            if stat.S_ISDIR(kind):
                folders.append((path, relative))
            elif stat.S_ISREG(kind):
                found.append(
                    RemoteFile(path, relative, entry.attrs.size or 0, clamp_mtime(entry.attrs.mtime))
                )
    return sorted(found, key=lambda f: f.relative)


async def pull(
    channel: ExecChannel,
    remote: str,
    local_dir: Path,
    *,
    force: bool = False,
    planned: Callable[[int, int], None] = lambda _files, _bytes: None,
    progress: Progress = lambda _n: None,
) -> PullResult:
    """Copy ``remote`` (a file or a directory on the machine, home-relative or absolute) into
    ``local_dir``.

    ``planned(files, bytes)`` is called once the work is known (for a progress bar's total),
    ``progress(n)`` as bytes land.
    """
    local_base(local_dir, remote)  # refused before anything is read
    try:
        if isinstance(channel, SshExecChannel):
            async with AsyncExitStack() as stack:
                try:
                    sftp = await stack.enter_async_context(channel.sftp())
                except (asyncssh.ChannelOpenError, asyncssh.SFTPError):
                    pass  # the server offers no SFTP: the reader over the exec channel below
                else:
                    return await _pull_sftp(sftp, remote, local_dir, force, planned, progress)
        return await pull_over_exec(
            channel, remote, local_dir, force=force, planned=planned, progress=progress
        )
    except (asyncssh.DisconnectError, asyncssh.SFTPConnectionLost) as exc:  # preempted, the link dropped
        raise PullError(
            f"the connection to the VM was lost during the pull ({one_line(exc.reason)}): pull again, it resumes"
        ) from None
    except asyncssh.Error as exc:
        raise PullError(f"SSH to the VM failed during the pull: {one_line(exc.reason)}") from None


async def _pull_sftp(
    sftp: asyncssh.SFTPClient,
    remote: str,
    local_dir: Path,
    force: bool,
    planned: Callable[[int, int], None],
    progress: Progress,
) -> PullResult:
    result = PullResult()
    files = await list_remote(sftp, remote, result.odd)
    todo = plan_pull(files, remote, local_dir, force, result)
    planned(len(todo), result.total_bytes)
    slots = asyncio.Semaphore(FILES_AT_ONCE)

    async def one(item: RemoteFile, target: Path, offset: int) -> None:
        async with slots:
            try:
                await _copy(sftp, item, local_dir, target, offset, progress)
            except asyncssh.SFTPNoSuchFile:
                # Deleted on the VM since the listing (a live run prunes old checkpoints): not an
                # error, the rest of the run still comes; said in the summary.
                part_path(target).unlink(missing_ok=True)
                result.vanished.append(item.relative or target.name)
                return
            except asyncssh.SFTPConnectionLost:
                raise
            except asyncssh.SFTPError as exc:  # e.g. a file of another user (a container's root)
                raise PullError(f"cannot read {item.path} on the VM: {one_line(exc.reason)}") from None
        (result.resumed if offset else result.copied).append(item.relative or target.name)
        result.bytes_copied += item.size - offset

    try:
        async with asyncio.TaskGroup() as group:  # one failure cancels the other copies
            for job in todo:
                group.create_task(one(*job))
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    return result


async def _copy(
    sftp: asyncssh.SFTPClient,
    item: RemoteFile,
    local_dir: Path,
    target: Path,
    offset: int,
    progress: Progress,
) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    inside(local_dir, target.parent)
    part = part_path(target)
    fd = open_part(part, offset)
    try:
        pending: list[tuple[int, int, asyncio.Future[bytes]]] = []
        async with sftp.open(item.path, "rb") as remote_file:
            position = offset
            while position < item.size or pending:
                while position < item.size and len(pending) < WINDOW:
                    size = min(BLOCK, item.size - position)
                    pending.append((position, size, asyncio.ensure_future(remote_file.read(size, position))))
                    position += size
                at, asked, task = pending[0]
                # Shielded: a cancelled read (another file's copy failed: the group cancels this
                # one) stops asyncssh's read amid its split requests, whose tasks then fail unseen
                # ("Task exception was never retrieved"). A read left to run ends by itself (a lost
                # connection fails it at once), and ``finally`` collects it with the others.
                data = (await asyncio.shield(task))[:asked]  # never more than asked for
                pending.pop(0)
                if not data and at < item.size:
                    raise PullError(f"{item.path} shrank on the VM while it was copied: pull again")
                os.pwrite(fd, data, at)
                progress(len(data))
        # Durable before it counts as complete; on a thread, so the disk's flush overlaps the network.
        await asyncio.to_thread(os.fsync, fd)
    finally:
        if pending:  # a failed read or write: let the window's reads end before the file closes
            reads = asyncio.gather(*(task for _, _, task in pending), return_exceptions=True)
            await asyncio.shield(reads)  # see above: they end by themselves, never cancelled
        try:
            # The VM's time on the part, complete or not: a later pull resumes it only for that
            # version. Set through the open file: the name could be a link by now.
            os.utime(fd, (item.mtime, item.mtime))
        finally:
            os.close(fd)
    os.replace(part, target)
