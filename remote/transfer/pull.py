"""Copy files from a VM to the laptop over the pooled SSH connection (SFTP), resumable, never clobbering.

``pull(get, remote, local_dir)`` copies a file or a whole directory tree. Each file is written to a
hidden ``.NAME.gcptui-part`` beside its target and renamed into place once complete, with the
remote modification time: a reader never sees half a file, and an interrupted pull resumes each
partial file where it stopped and skips the files already complete (same size, same time). A local
file that differs from the remote one and is newer is kept (and reported) unless ``force``.

Fast where it matters: several files are copied at once and each file's reads are pipelined (a
window of requests in flight), so many small files are not one round trip each and a large file
streams at the link's speed.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import ConnectionGetter
from gcptui.remote.safe_text import one_line, plain_name

BLOCK = 1024 * 1024  # asyncssh splits a read into the server's largest requests, in parallel
WINDOW = 8  # reads in flight per file
FILES_AT_ONCE = 8
PART_SUFFIX = ".gcptui-part"


@dataclass(frozen=True, slots=True)
class RemoteFile:
    path: str  # on the VM
    relative: str  # below the pulled folder ("" for a single file)
    size: int
    mtime: int


@dataclass
class PullResult:
    """What a pull did; ``kept`` are local files left alone because they are newer (no ``force``),
    ``vanished`` files deleted on the VM between the listing and their copy (a live run's pruning)."""

    copied: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    complete: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    odd: list[str] = field(default_factory=list)  # names refused (controls, '..', too long): shown escaped
    bytes_copied: int = 0
    total_bytes: int = 0


Progress = Callable[[int], None]  # bytes just written


class PullError(GcptuiError):
    """The remote path cannot be copied (missing, unreadable, a special file)."""


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
        return [RemoteFile(remote, "", attrs.size or 0, _mtime(attrs.mtime))]
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
                found.append(RemoteFile(path, relative, entry.attrs.size or 0, _mtime(entry.attrs.mtime)))
    return sorted(found, key=lambda f: f.relative)


MAX_ODD = 100
MAX_MTIME = 1 << 40  # far beyond any real time; os.utime overflows on the largest the protocol allows


def _mtime(value: object) -> int:
    return value if isinstance(value, int) and 0 <= value <= MAX_MTIME else 0


def local_base(local_dir: Path, remote: str) -> Path:
    """``LOCAL_DIR/<last name of remote>``; ``PullError`` when that name is no plain file name
    (``runs/x/..`` from a VM's checkpoint path once landed in ``pulled/OTHER-VM``)."""
    name = posixpath.basename(remote.rstrip("/"))
    if not plain_name(name):
        raise PullError(
            f"refusing to pull {ascii(remote)[:200]}: its last part {ascii(name)[:80]} cannot name a "
            f"folder in {local_dir}; give the run folder's own path"
        )
    return local_dir / name


def local_target(local_dir: Path, remote: str, item: RemoteFile) -> Path:
    """Where ``item`` lands: ``LOCAL_DIR/<basename of remote>/<relative>``; names from the VM that
    would not stay inside (``..``, absolute, odd) are refused."""
    base = local_base(local_dir, remote)
    if not item.relative:
        return base
    if not all(plain_name(part) for part in item.relative.split("/")):
        raise PullError(f"refusing the remote name {ascii(item.relative)[:200]}: it leaves {local_dir}")
    return base / item.relative


def inside(local_dir: Path, folder: Path) -> None:
    """``PullError`` unless ``folder``, its links resolved, is inside ``local_dir``: a planted link
    on the way (``pulled/vm/run -> /home/me``) must not carry the writes elsewhere."""
    if not folder.resolve().is_relative_to(local_dir.resolve()):
        raise PullError(f"refusing to write into {folder}: a link there leads out of {local_dir}")


def open_part(part: Path, offset: int, *, read: bool = False) -> int:
    """The part file, opened for writing without following a link: made anew (``O_EXCL``) when the
    copy starts over, reopened as is only to resume, and only when it is a plain file."""
    mode = os.O_RDWR if read else os.O_WRONLY
    if offset == 0:
        part.unlink(missing_ok=True)
        return os.open(part, mode | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    fd = os.open(part, mode | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PullError(f"{part} is not a plain file: move it away and pull again")
    return fd


def part_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{PART_SUFFIX}")


async def pull(
    get: ConnectionGetter,
    remote: str,
    local_dir: Path,
    *,
    force: bool = False,
    planned: Callable[[int, int], None] = lambda _files, _bytes: None,
    progress: Progress = lambda _n: None,
) -> PullResult:
    """Copy ``remote`` (a file or a directory on the VM) into ``local_dir``.

    ``planned(files, bytes)`` is called once the work is known (for a progress bar's total),
    ``progress(n)`` as bytes land.
    """
    try:
        return await _pull(get, remote, local_dir, force, planned, progress)
    except (asyncssh.DisconnectError, asyncssh.SFTPConnectionLost) as exc:  # preempted, the link dropped
        raise PullError(
            f"the connection to the VM was lost during the pull ({one_line(exc.reason)}): pull again, it resumes"
        ) from None
    except asyncssh.Error as exc:  # e.g. no SFTP server on the VM
        raise PullError(f"SFTP to the VM failed: {one_line(exc.reason)}") from None


async def _pull(
    get: ConnectionGetter,
    remote: str,
    local_dir: Path,
    force: bool,
    planned: Callable[[int, int], None],
    progress: Progress,
) -> PullResult:
    conn = await get()
    async with conn.start_sftp_client() as sftp:
        local_base(local_dir, remote)  # refused before anything is read
        result = PullResult()
        files = await list_remote(sftp, remote, result.odd)
        todo: list[tuple[RemoteFile, Path, int]] = []
        for item in files:
            target = local_target(local_dir, remote, item)
            state = local_state(target, item.size, item.mtime * SECOND_NS, SECOND_NS)
            if state == "complete":
                result.complete.append(item.relative or target.name)
                continue
            if state == "newer" and not force:
                result.kept.append(item.relative or target.name)
                continue
            offset = resume_offset(part_path(target), item.size, item.mtime * SECOND_NS, SECOND_NS)
            todo.append((item, target, offset))
        result.total_bytes = sum(item.size - offset for item, _, offset in todo)
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


SECOND_NS = 1_000_000_000  # SFTP times are whole seconds


def resume_offset(part: Path, size: int, remote_ns: int, tick_ns: int) -> int:
    """Where to resume a file of ``size`` bytes last written at ``remote_ns`` from its part file: the
    part's size when it holds a prefix of this very version (a stopped copy stamps the part with the
    remote time, compared to the source's ``tick_ns`` precision), else 0."""
    try:
        st = part.stat()
    except FileNotFoundError:
        return 0
    # A file rewritten since (a `last.pt` saved again) must not get its new tail appended to the
    # old version's head: a different time, or a part longer than the file, starts over.
    same_version = st.st_mtime_ns // tick_ns == remote_ns // tick_ns
    return st.st_size if same_version and st.st_size <= size else 0


def local_state(target: Path, size: int, remote_ns: int, tick_ns: int) -> str:
    """``missing``, ``complete`` (same size, same time to the source's ``tick_ns`` precision),
    ``newer`` (differs, changed here later) or ``older``.

    Size alone is not enough: a run rewrites files in as many bytes (``latest.json`` naming a newer
    step), and a pull must then take the new one.
    """
    try:
        st = target.stat()
    except FileNotFoundError:
        return "missing"
    if st.st_size == size and st.st_mtime_ns // tick_ns == remote_ns // tick_ns:
        return "complete"
    # A local edit within the same tick still counts as newer.
    return "newer" if st.st_mtime_ns > remote_ns else "older"


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
