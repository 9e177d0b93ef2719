"""`[sync] dest` resolves by one rule on the laptop (remote/dest_path.py) and the VM-shipped files
apply the same one: the sync agent's ``resolve_dest`` and the job supervisor's ``launch``."""

from __future__ import annotations

import importlib.util
import posixpath
import re
import subprocess
from pathlib import Path

import pytest

from gcptui.remote.dest_path import absolute, home_relative, in_dest

VM = Path(__file__).resolve().parents[2] / "remote" / "vm"
HOME = "/home/alice"
CASES = {
    "~": "/home/alice",
    "~/": "/home/alice",
    "~/project": "/home/alice/project",
    "~/a/../b": "/home/alice/b",
    "/srv/data/run": "/srv/data/run",
    "project": "/home/alice/project",
    "nested/dir/": "/home/alice/nested/dir",
    "~user": "/home/alice/~user",  # no user expansion: a folder named so below the home
}


@pytest.mark.parametrize(("dest", "expected"), sorted(CASES.items()))
def test_the_laptop_rule(dest: str, expected: str) -> None:
    assert absolute(dest, HOME) == expected


def test_paths_below_dest_are_home_relative_or_absolute() -> None:
    assert home_relative("~") == "." and home_relative("~/p") == "p" and home_relative("/x/") == "/x"
    assert in_dest("~/project", "runs/metrics.jsonl") == "project/runs/metrics.jsonl"
    assert in_dest("~", "runs/m.jsonl") == "runs/m.jsonl"  # not "~/runs/...", a folder named ~
    assert in_dest("/srv/p", "../out") == "/srv/out"
    assert in_dest("~/project", "~/elsewhere/x") == "elsewhere/x"
    assert in_dest("~/project", "/abs/x") == "/abs/x"


def test_the_sync_agent_applies_the_same_rule() -> None:
    spec = importlib.util.spec_from_file_location("shipped_sync_agent", VM / "sync_agent.py")
    assert spec is not None and spec.loader is not None
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    assert {dest: agent.resolve_dest(dest, HOME) for dest in CASES} == CASES


def test_the_job_supervisor_applies_the_same_rule() -> None:
    script = (VM / "gcptui-job.sh").read_text()
    found = re.search(r"launch\(\) \{[^\n]*\n(\tcase \$1 in\n.*?\n\tesac)\n", script, re.S)
    assert found, "gcptui-job.sh's launch() no longer starts with the dest case: update this test"
    probe = (
        f'resolve() {{\n{found.group(1)}\n\tprintf "%s\\n" "$dir"\n}}\nfor d in "$@"; do resolve "$d"; done'
    )
    out = subprocess.run(
        ["sh", "-c", probe, "probe", *CASES], env={"HOME": HOME}, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # The shell does not normalise (`a/../b`, a trailing slash): compare as the filesystem would.
    assert [posixpath.normpath(p) for p in out] == list(CASES.values())
