"""Workflows and faces decide on the neutral state and a row's capabilities, never on GCE's own
status words, its operation types or ``source ==`` tests: those live in the GCE backend
(remote/cloud/, remote/compute/gce/) and each other backend's folder, the emulator, the demo that
drives it, and tests.

Reads the code's syntax trees, so docstrings and comments may still name GCE's words.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = "remote/compute/"  # each backend's own folder below it may name its provider's words
ALLOWED = (
    "remote/cloud/",
    "remote/compute/gce/",
    "remote/emulator/",
    "tui/cli/demo.py",
    "tui/cli/demo_app.py",
)
GCE_WORDS = frozenset(
    {"RUNNING", "TERMINATED", "STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "PROVISIONING", "STAGING",
     "REPAIRING"}
)  # fmt: skip


def _docstring_ids(tree: ast.AST) -> set[int]:
    """The string constants that stand alone as statements (docstrings and bare strings)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


KINDS = frozenset({"gce", "host", "tpu", "vertex", "gke"})


def _source_test(node: ast.Compare) -> bool:
    """``x.source == "gce"`` and kin (not ``[sync].source``, which is a folder)."""
    sides = (node.left, *node.comparators)
    return any(isinstance(n, ast.Attribute) and n.attr == "source" for n in sides) and any(
        isinstance(n, ast.Constant) and n.value in KINDS for n in sides
    )


def offences(path: Path, where: str) -> list[str]:
    """``where:line: what`` for each GCE word, operation type or ``source`` comparison in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstring_ids(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            word = node.value
            if word in GCE_WORDS or word.startswith("compute.instances.") or word == "DELETE":
                found.append(f"{where}:{node.lineno}: GCE's word {word!r}")
        elif isinstance(node, ast.Compare) and _source_test(node):
            found.append(f"{where}:{node.lineno}: a test of .source")
    return found


def product_files() -> list[Path]:
    files = sorted([*(ROOT / "remote").rglob("*.py"), *(ROOT / "tui").rglob("*.py")])
    return [p for p in files if not _allowed(str(p.relative_to(ROOT)))]


def _allowed(where: str) -> bool:
    """The GCE backend's clients, the emulator, the demo, and any backend's own folder (not the seam's
    own modules, directly in remote/compute/)."""
    inside_a_backend = where.startswith(BACKENDS) and "/" in where[len(BACKENDS) :]
    return where.startswith(ALLOWED) or inside_a_backend


def test_no_gce_status_word_operation_type_or_source_test_outside_the_gce_backend() -> None:
    found = [line for path in product_files() for line in offences(path, str(path.relative_to(ROOT)))]
    assert found == [], "\n".join(found)


def test_the_check_sees_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""RUNNING in a docstring is fine."""\n'
        "def f(i, config):\n"
        '    if config.sync.source == "x" or i.source != "host":\n'
        '        return i.status == "TERMINATED" or "compute.instances.preempted"\n'
    )
    assert sorted(line.split(": ", 1)[1] for line in offences(sample, "sample.py")) == [
        "GCE's word 'TERMINATED'",
        "GCE's word 'compute.instances.preempted'",
        "a test of .source",
    ]


# The seam closed: outside compute/ (the seam and each backend's folder), GCE's plumbing (remote/cloud/,
# which the GCE backend stands on) and the emulator, nothing reaches GCE's clients (``FleetSource.gce()``,
# ``.reader()``) or downcasts a backend to its class: callers ask the protocol (``compute.of(row)``).
SEAM_ALLOWED = ("remote/compute/", "remote/cloud/", "remote/emulator/")
# Downcasts allowed per file outside the seam: none (the Vertex workflows ask ``cloud_logs``).
DOWNCAST_LEFT: dict[str, int] = {}
CLIENT_CALLS = frozenset({"gce", "reader"})


def backend_class_names() -> frozenset[str]:
    from gcptui.remote.compute.registry import BACKENDS

    return frozenset({"Backend", *(path.rpartition(":")[2] for path in BACKENDS.values())})


def _class_names(node: ast.expr) -> list[str]:
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    return [
        p.id if isinstance(p, ast.Name) else p.attr for p in parts if isinstance(p, ast.Name | ast.Attribute)
    ]


def seam_offences(path: Path, where: str, classes: frozenset[str]) -> list[str]:
    """``where:line: what`` for each call of a GCE client getter and each ``isinstance`` on a backend class."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CLIENT_CALLS and not (node.args or node.keywords):
            found.append(f"{where}:{node.lineno}: .{func.attr}() (GCE's client, past the seam)")
        elif isinstance(func, ast.Name) and func.id == "isinstance" and len(node.args) == 2:
            hit = [name for name in _class_names(node.args[1]) if name in classes]
            if hit:
                found.append(f"{where}:{node.lineno}: isinstance on {hit[0]}")
    return found


def test_no_gce_client_or_backend_downcast_outside_the_seam() -> None:
    classes = backend_class_names()
    found: list[str] = []
    for path in sorted([*(ROOT / "remote").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        where = str(path.relative_to(ROOT))
        if where.startswith(SEAM_ALLOWED):
            continue
        lines = seam_offences(path, where, classes)
        downcasts = [line for line in lines if ": isinstance on " in line]
        if len(downcasts) == DOWNCAST_LEFT.get(where, -1):
            lines = [line for line in lines if line not in downcasts]
        found.extend(lines)
    assert found == [], "\n".join(found)


def test_the_seam_check_sees_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(services, backend, b):\n"
        "    services.fleet.gce().stop('a', 'z')\n"
        "    rows = services.fleet.reader().list_instances()\n"
        "    ok = services.reader(timeout=3)  # a reader of something else, with arguments\n"
        "    if isinstance(backend, (int, GkeBackend)) or isinstance(b, registry.VertexBackend):\n"
        "        return isinstance(b, PodExecChannel)\n"
    )
    assert sorted(
        line.split(": ", 1)[1] for line in seam_offences(sample, "sample.py", backend_class_names())
    ) == [
        ".gce() (GCE's client, past the seam)",
        ".reader() (GCE's client, past the seam)",
        "isinstance on GkeBackend",
        "isinstance on VertexBackend",
    ]


def test_no_source_test_in_the_google_plumbing_every_backend_shares() -> None:
    """remote/cloud/ may name GCE's words (the GCE backend stands on it) but decides nothing by a row's
    kind: the backend that listed a row answers for it (``os_login``, a price from its machine type)."""
    found = []
    for path in sorted((ROOT / "remote" / "cloud").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = str(path.relative_to(ROOT))
        found += [
            f"{where}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Compare) and _source_test(n)
        ]
    assert found == [], "\n".join(found)
