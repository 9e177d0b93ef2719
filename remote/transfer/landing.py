"""Where pulled files land on the laptop, whatever carried them (SFTP, the exec channel's reader,
the bucket): the local path built only from plain names inside the pull folder, part files opened
``O_EXCL|O_NOFOLLOW`` and renamed into place, what is complete, newer, or resumable.

Each file is written to a hidden ``.NAME.gcptui-part`` beside its target and renamed into place once
complete, with the remote modification time: a reader never sees half a file, and an interrupted
pull resumes each partial file where it stopped and skips the files already complete (same size,
same time). A local file that differs from the remote one and is newer is kept (and reported)
unless ``force``.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import plain_name

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


MAX_ODD = 100
MAX_MTIME = 1 << 40  # far beyond any real time; os.utime overflows on the largest the protocol allows


def clamp_mtime(value: object) -> int:
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


def plan_pull(
    files: list[RemoteFile], remote: str, local_dir: Path, force: bool, result: PullResult
) -> list[tuple[RemoteFile, Path, int]]:
    """What to copy of ``files`` (file, local target, offset to resume at); the rest is recorded in
    ``result`` as complete or kept. Every target is built from plain names inside ``local_dir``."""
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
    return todo


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
