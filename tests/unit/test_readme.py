"""The README's test command is exactly what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^(pip install .*)$", readme.split("## ")[0], flags=re.M)
    assert len(commands) == 2 and "gcptui demo" in commands[0]
    ci_lines = (ROOT / ".ci/run").read_text().splitlines()
    assert commands[1] in ci_lines
