"""docs/ARCHITECTURE.md stays short and its "adding a kind" list stays true.

A product file outside a backend's own folder and the emulator's API rooms that names every kind of
compute but GCE is a place a new kind registers in: the walkthrough must name it, so the next kind's author
finds every step there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
KINDS = ("tpu", "vertex", "gke")  # every kind but GCE, the first (its word is everywhere)
# A kind's own folders: they name their own kind, and the emulator's API rooms name each other's docs.
OWN = re.compile(
    r"^remote/(compute|emulator)/(gce|hosts|tpu|vertex|gke|compute|logging|oslogin|billing|storage|iam|cloudbuild|artifactregistry)/"
)


def registration_points() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "remote/*.py", "tui/*.py", "pyproject.toml"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found = set()
    for name in listed:
        if OWN.match(name) or not (ROOT / name).is_file():
            continue
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace").lower()
        if all(re.search(rf"\b{kind}\b", text) for kind in KINDS):
            found.add(name)
    return found


def test_the_architecture_doc_is_short() -> None:
    assert len(DOC.read_bytes()) < 15_000


def test_every_registration_point_of_a_kind_is_in_the_walkthrough() -> None:
    doc = DOC.read_text(encoding="utf-8")
    walkthrough = doc.split("### Adding a kind of compute", 1)[1].split("\n## ", 1)[0]
    missing = sorted(p for p in registration_points() if p not in walkthrough)
    assert not missing, f"name these in ARCHITECTURE.md's 'Adding a kind of compute': {missing}"


def test_every_file_the_walkthrough_names_exists() -> None:
    doc = DOC.read_text(encoding="utf-8")
    walkthrough = doc.split("### Adding a kind of compute", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:remote|tui|tests)/[\w/]+\.py|pyproject\.toml)`", walkthrough))
    assert named
    # ``K`` stands for the new kind's name: its own files do not exist yet.
    assert not [n for n in sorted(named) if "/K." not in n and not (ROOT / n).exists()]
