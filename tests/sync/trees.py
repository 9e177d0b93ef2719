"""Compare trees file by file and byte by byte; wait on conditions, never on sleeps."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

TMP_PREFIX = ".gcptui-tmp."

Tree = dict[str, tuple]


def snapshot(root: Path, skip: Callable[[str], bool] = lambda rel: False) -> Tree:
    """rel path -> ("f", bytes, exec bits) | ("l", target) | ("d",)."""
    out: Tree = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in dirnames + filenames:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if skip(rel):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # changing while we look: the next poll sees it settled
            if stat.S_ISLNK(st.st_mode):
                try:
                    out[rel] = ("l", os.readlink(path))
                except FileNotFoundError:
                    continue  # replaced between the lstat and the readlink: as above
                if name in dirnames:
                    dirnames.remove(name)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d",)
            elif stat.S_ISREG(st.st_mode):
                try:
                    out[rel] = ("f", path.read_bytes(), st.st_mode & 0o111)
                except OSError:
                    continue
    return out


def diff(a: Tree, b: Tree) -> str:
    """A short description of how two trees differ ("" when equal)."""
    lines = []
    for rel in sorted(set(a) | set(b)):
        x, y = a.get(rel), b.get(rel)
        if x != y:

            def show(v):  # type: ignore[no-untyped-def]
                return (
                    v if v is None or v[0] != "f" else ("f", (v[1] or b"")[:20], len(v[1] or b""), oct(v[2]))
                )

            lines.append(f"{rel}: remote={show(x)} expected={show(y)}")
    return "\n".join(lines[:15]) + (f"\n... {len(lines) - 15} more" if len(lines) > 15 else "")


async def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_equal(remote: Path, expected: Callable[[], Tree] | Tree, timeout: float = 15.0) -> None:
    """Poll until the VM's tree equals the expected one; on timeout fail with the difference."""
    deadline = time.monotonic() + timeout
    while True:
        want = expected() if callable(expected) else expected
        got = snapshot(remote)
        if got == want:
            return
        if time.monotonic() > deadline:
            raise AssertionError("remote tree differs:\n" + diff(got, want))
        await asyncio.sleep(0.05)


def write(root: Path, rel: str, data: bytes | str, mode: int | None = None) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path
