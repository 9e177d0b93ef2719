"""A key and its command reach the same use case (``remote/actions.py``): the faces never call a
backend's lifecycle methods themselves, nor run a job on a row's ranked members with a runner of their
own. Reads the syntax trees of tui/ (the CLI and the TUI)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = frozenset({"start", "stop", "delete", "simulate_maintenance"})


def offences(path: Path, where: str) -> list[str]:
    """Calls of ``compute.of(row).start(...)`` and kin, references to a backend's lifecycle method
    (``backend.stop`` handed on), and ``WorkerJobRunner(...)`` built in a face."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in LIFECYCLE:
            base = node.value
            of_call = (
                isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr == "of"
            )
            if of_call or (isinstance(base, ast.Name) and base.id == "backend"):
                found.append(f"{where}:{node.lineno}: a backend's {node.attr} outside remote/actions.py")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "WorkerJobRunner"
        ):
            found.append(
                f"{where}:{node.lineno}: WorkerJobRunner built in a face (remote/actions.on_members)"
            )
    return found


def test_the_faces_reach_machines_and_members_through_the_use_cases() -> None:
    found = []
    for path in sorted((ROOT / "tui").rglob("*.py")):
        found += offences(path, str(path.relative_to(ROOT)))
    assert found == [], "\n".join(found)
    for face in ("tui/app.py", "tui/cli/fleet.py"):
        assert "machine_action" in (ROOT / face).read_text(), face
    for face in ("tui/app.py", "tui/cli/jobs.py"):
        assert "on_members" in (ROOT / face).read_text(), face


def test_the_check_sees_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(services, row, backend):\n"
        "    services.compute.of(row).stop(row)\n"
        "    call = {'p': backend.simulate_maintenance}\n"
        "    runner = WorkerJobRunner(services.config)\n"
        "    timer.stop()  # not a backend\n"
    )
    assert sorted(line.split(": ", 1)[1] for line in offences(sample, "sample.py")) == [
        "WorkerJobRunner built in a face (remote/actions.on_members)",
        "a backend's simulate_maintenance outside remote/actions.py",
        "a backend's stop outside remote/actions.py",
    ]
