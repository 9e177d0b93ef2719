"""What `pip install` puts on a machine: one `gcptui` package; the trainer on its own, torch and numpy only."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(source: Path, out: Path) -> Path:
    """Build from a clean copy: the build leaves build/ and egg-info behind, never in the checkout."""
    copy = out / "src"
    names = ["tui", "remote", "pyproject.toml", "setup.py", "README.md"] if source == ROOT else ["."]
    for name in names:
        origin, target = source / name, copy / name
        if origin.is_dir():
            shutil.copytree(
                origin,
                target,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"),
            )
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
    source = copy
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def record(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        return [row[0] for row in csv.reader(io.StringIO(archive.read(name).decode()))]


def requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(name).decode()).get_all("Requires-Dist") or []


@pytest.fixture(scope="module")
def gcptui_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_installs_one_top_level_package(gcptui_wheel: Path) -> None:
    files = record(gcptui_wheel)
    tops = {path.split("/")[0] for path in files}
    assert tops == {"gcptui", "gcptui-0.1.0.dist-info"}, tops
    assert "gcptui/tui/cli/main.py" in files and "gcptui/remote/vm/gcptui-job.sh" in files
    assert "gcptui/remote/vm/sync_agent.py" in files and "gcptui/tui/app.tcss" in files
    assert not [p for p in files if p.startswith("gcptui/") and "/tests/" in p]


def test_installing_beside_a_package_named_trainer_leaves_it_untouched(
    gcptui_wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "trainer").mkdir(parents=True)
    theirs = {"trainer/__init__.py": "from .api import Trainer\n", "trainer/api.py": "class Trainer: ...\n"}
    for path, text in theirs.items():
        (site / path).write_text(text)
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                             str(gcptui_wheel)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert {p.name for p in (site / "trainer").iterdir()} == {"__init__.py", "api.py"}
    assert all((site / path).read_text() == text for path, text in theirs.items())
    assert (site / "gcptui" / "tui" / "cli" / "main.py").is_file()


def test_the_trainer_is_its_own_distribution_needing_only_torch_and_numpy(tmp_path: Path) -> None:
    wheel = build_wheel(ROOT / "trainer", tmp_path)
    tops = {path.split("/")[0] for path in record(wheel)}
    assert tops == {"gcptui_trainer", "gcptui_trainer-0.1.0.dist-info"}, tops

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0] for req in reqs}

    always = [req for req in requirements(wheel) if "extra ==" not in req]
    assert names(always) == {"torch", "numpy"}, requirements(wheel)
    gcs = [req for req in requirements(wheel) if 'extra == "gcs"' in req]
    assert names(gcs) == {"google-cloud-storage"}, requirements(wheel)


def test_the_reference_run_starts_beside_a_users_own_trainer_py(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text("raise SystemExit('the user\\'s trainer.py ran instead')\n")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("raise SystemExit('a trainer package ran instead')\n")
    result = subprocess.run([sys.executable, "-m", "gcptui_trainer", "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "python -m gcptui_trainer" in result.stdout
