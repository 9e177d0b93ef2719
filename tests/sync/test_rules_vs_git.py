"""What sync sends is what git sees as not ignored: compared with real ``git ls-files`` on tricky trees."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import SyncRules
from tests.sync.trees import write

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git_files(root: Path, home: Path) -> set[str]:
    """The files git lists as untracked and not ignored (only this tree's rules: no global ones)."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard"],
        capture_output=True, check=True, env=env,
    ).stdout  # fmt: skip
    return set(out.decode().split("\0")) - {""}


def synced_files(root: Path) -> set[str]:
    return {rel for rel, e in scan_tree(root, SyncRules(root)).entries.items() if e.kind == "f"}


IDIOMS = [
    # The whitelist idiom: ignore everything, re-include directories, then the wanted files.
    (
        {".gitignore": "*\n!*/\n!*.py\n"},
        ["train.py", "pkg/model.py", "pkg/sub/util.py", "notes.txt", "pkg/b.bin"],
    ),
    (
        {"configs/.gitignore": "*\n!*/\n!*.yaml\n"},
        ["configs/a.yaml", "configs/exp/b.yaml", "configs/exp/key.txt"],
    ),
    # A directory-only "!" pattern deeper down re-includes directories, never files.
    (
        {".gitignore": "*.ckpt\n.env\n", "exp/.gitignore": "!*/\n"},
        ["exp/run1/model.ckpt", "exp/run1/.env", "exp/a.py"],
    ),
    # Directory patterns exclude the directory, and so what is in it; nothing below comes back.
    ({".gitignore": "build/\n!build/keep.txt\n*/\n"}, ["build/keep.txt", "build/x.o", "top.txt", "src/a.c"]),
    (
        {".gitignore": "data/**\n!data/keep.csv\n"},
        ["data/keep.csv", "data/big.csv", "data/sub/x.csv", "dataset.py"],
    ),
    ({".gitignore": "logs\n!logs/\n"}, ["logs/a.log", "logs/sub/b.log", "x/logs", "x/logs2"]),
    (
        {".gitignore": "/out\nsub/\n", "a/.gitignore": "!sub/\n"},
        ["out/x", "a/out/y", "a/sub/z", "sub/w", "b/sub/v"],
    ),
    # "x/**/" is every directory below x (pathspec alone reads it as x itself).
    (
        {".gitignore": "b/\n!a/**/\n"},
        ["a/a/b/x.py", "a/b/y.py", "b/z.py", "c/b/w.py"],
    ),
    ({".gitignore": "a/**/\n"}, ["a/x.py", "a/b/y.py", "a/b/c/z.py", "b/a/w.py"]),
]


@pytest.mark.parametrize(("ignores", "files"), IDIOMS, ids=[str(i) for i in range(len(IDIOMS))])
def test_gitignore_idioms_select_what_git_selects(
    tmp_path: Path, ignores: dict[str, str], files: list[str]
) -> None:
    root = tmp_path / "tree"
    for rel, text in ignores.items():
        write(root, rel, text)
    for rel in files:
        write(root, rel, "x")
    assert synced_files(root) == git_files(root, tmp_path)


PATTERNS = ["*", "!*/", "!*.py", "*.py", "*.log", "!keep.log", "a/", "a", "/a", "!a/", "a/*", "!a/b", "a/**",
            "**/b", "b/", "!b/", "**/c/**", "!**/c/x.py", "*/", "x.py", "!x.py", "/b/x.py", "c", "!c/", "a/b/",
            "!a/b/", "!a", "b/**/x.py", "!/a/x.py"]  # fmt: skip


def test_random_ignore_files_select_what_git_selects(tmp_path: Path) -> None:
    rng = random.Random(20261123)
    for n in range(120):
        root = tmp_path / str(n)
        for _ in range(12):
            depth = rng.randint(0, 3)
            rel = "/".join(
                [rng.choice("abc") for _ in range(depth)] + [rng.choice(["x.py", "y.log", "keep.log", "z"])]
            )
            if not any((root / rel).is_file() or (root / up).is_file() for up in _ups(rel)):
                write(root, rel, "x")
        ignores = {"": rng.sample(PATTERNS, rng.randint(1, 4))}
        for d in rng.sample(["a", "b", "a/b", "c/a"], rng.randint(0, 3)):
            if (root / d).is_dir():
                ignores[d] = rng.sample(PATTERNS, rng.randint(1, 3))
        for d, lines in ignores.items():
            write(root, f"{d}/.gitignore" if d else ".gitignore", "\n".join(lines) + "\n")
        assert synced_files(root) == git_files(root, tmp_path), ignores


def _ups(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


@pytest.mark.parametrize(
    ("exclude", "ignores", "rel_dir", "skipped"),
    [
        (["data/**"], {}, "data", True),  # the tree: 95,000 files never listed
        (["data/**"], {}, "src", False),
        (["/x/*"], {}, "x", True),
        ([], {"sub/.gitignore": "*\n"}, "sub", True),  # a folder's own .gitignore ignoring all of it
        ([], {".gitignore": "a/**\n"}, "a/b", True),  # below a listed-but-emptied folder too
        (["data/**", "!data/keep.csv"], {}, "data", False),  # a "!" may bring a name back: list it
        (["data/**"], {"data/.gitignore": "!keep.csv\n"}, "data", False),
        (["data/*.csv"], {}, "data", False),  # only some names
        (["data/*e"], {}, "data", False),
        (["data/**/"], {}, "data", False),  # directories only: its files are synced
    ],
)
def test_a_folder_whose_every_name_is_ignored_is_not_listed(
    tmp_path: Path, exclude: list[str], ignores: dict[str, str], rel_dir: str, skipped: bool
) -> None:
    root = tmp_path / "tree"
    for rel, text in ignores.items():
        write(root, rel, text)
    write(root, f"{rel_dir}/keep.csv", "x")
    rules = SyncRules(root, exclude)
    assert rules.contents_ignored(rel_dir) is skipped
    if skipped:  # and what the scan leaves out is what the rules would have left out anyway
        assert not rules.synced(f"{rel_dir}/keep.csv", False) and not rules.synced(f"{rel_dir}/d", True)
