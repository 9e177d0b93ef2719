"""mypy (configured in pyproject.toml) finds no type error in the product code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_nothing() -> None:
    mypy = shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    result = subprocess.run([mypy, "remote", "tui", "trainer"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
