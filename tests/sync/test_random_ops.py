"""Thousands of seeded random operations while following end with equal trees."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

import pytest

from tests.sync.conftest import RemoteTarget
from tests.sync.trees import snapshot, wait_equal


def listing(root: Path) -> tuple[list[Path], list[Path]]:
    files, dirs = [], [root]
    for dirpath, dirnames, filenames in os.walk(root):
        dirs += [Path(dirpath, d) for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        files += [Path(dirpath, f) for f in filenames if not os.path.islink(os.path.join(dirpath, f))]
    return files, dirs


def random_op(rng: random.Random, root: Path, files: list[Path], dirs: list[Path]) -> None:
    """One random change; ``files``/``dirs`` may be stale (a failed op is fine)."""
    kind = rng.choices(
        ["create", "modify", "delete", "mkdir", "rmtree", "rename_file", "rename_dir", "chmod", "symlink"],
        weights=[30, 25, 12, 8, 2, 8, 3, 6, 3],
    )[0]
    name = f"{rng.choice(['f', 'g', 'ü n', 'data'])}{rng.randrange(40)}"
    try:
        if kind == "create" or (kind in ("modify", "delete", "rename_file", "chmod") and not files):
            (rng.choice(dirs) / f"{name}.txt").write_bytes(rng.randbytes(rng.choice([0, 10, 100, 5000])))
        elif kind == "modify":
            rng.choice(files).write_bytes(rng.randbytes(rng.choice([1, 10, 100, 5000])))
        elif kind == "delete":
            rng.choice(files).unlink()
        elif kind == "mkdir":
            (rng.choice(dirs) / f"d{name}" / "sub").mkdir(parents=True, exist_ok=True)
        elif kind == "rmtree" and len(dirs) > 1:
            shutil.rmtree(rng.choice(dirs[1:]))
        elif kind == "rename_file":
            os.replace(rng.choice(files), rng.choice(dirs) / f"{name}.moved")
        elif kind == "rename_dir" and len(dirs) > 1:
            src = rng.choice(dirs[1:])
            dst = rng.choice(dirs) / f"r{name}"
            if not dst.exists() and not dst.is_relative_to(src):
                os.rename(src, dst)
        elif kind == "chmod":
            rng.choice(files).chmod(rng.choice([0o644, 0o755]))
        elif kind == "symlink":
            link = rng.choice(dirs) / f"l{name}"
            if not link.exists() and not link.is_symlink():
                link.symlink_to(f"{name}.txt")
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, OSError):
        pass  # a random op can lose a race against the tree itself; that is fine


@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("SYNC_RANDOM_SEEDS", "7").split(",")])
async def test_random_operations_while_following_end_with_equal_trees(
    local: Path, target: RemoteTarget, follow, seed: int
) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        random_op(rng, local, *listing(local))
    await follow()
    for i in range(2500):
        if i % 10 == 0:
            files, dirs = listing(local)
        random_op(rng, local, files, dirs)
        if i % 25 == 0:
            await asyncio.sleep(0.005)  # let batches of various sizes go out while the tree changes
    await wait_equal(target.root, lambda: snapshot(local), timeout=30)
