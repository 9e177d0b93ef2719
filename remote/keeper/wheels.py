"""Wheels of this very gcptui (and gcptui_trainer), made here without a build backend or an index.
The keeper's wheelhouse (``wheelhouse.py``) ships gcptui's alone: the keeper trains nothing.

Both are pure Python (``py3-none-any``). From an ordinary install a wheel is zipped back from the
files its ``RECORD`` lists; from an editable install (the source tree) from the folders
``pyproject.toml``'s ``package-dir`` maps (``remote/`` -> ``gcptui/remote``, ``tui/`` -> ``gcptui/tui``,
``trainer/`` -> ``gcptui_trainer``). ``METADATA`` and ``entry_points.txt`` are the installed
distribution's own, so the keeper runs the same version with the same dependencies and commands.
(``pip wheel`` needs setuptools' ``bdist_wheel`` or a package index to fetch one: neither is a given.)
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from importlib.metadata import Distribution, distributions
from pathlib import Path

from gcptui.remote.errors import GcptuiError

# Where an editable install's packages come from, as pyproject.toml / trainer/pyproject.toml map them.
SOURCE_LAYOUT = {
    "gcptui": {"gcptui/remote": "remote", "gcptui/tui": "tui"},
    "gcptui_trainer": {"gcptui_trainer": "."},
}
SKIPPED_DIRS = {"__pycache__", "build", "dist", "tests"}
KEPT_SUFFIXES = {".py", ".sh", ".json", ".tcss", ".typed"}
WHEEL = "Wheel-Version: 1.0\nGenerator: gcptui keeper\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def build_wheel(name: str, folder: Path) -> Path:
    dist = _installed(name)
    files = _editable_files(dist, name) if _editable_root(dist) else _installed_files(dist)
    version = dist.version
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    path = folder / f"{stem}-py3-none-any.whl"
    record: list[str] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:

        def add(arcname: str, data: bytes) -> None:
            wheel.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")

        for arcname, source in sorted(files.items()):
            add(arcname, source.read_bytes())
        add(
            f"{info}/METADATA",
            (
                dist.read_text("METADATA") or f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            ).encode(),
        )
        entry_points = dist.read_text("entry_points.txt")
        if entry_points:
            add(f"{info}/entry_points.txt", entry_points.encode())
        add(f"{info}/WHEEL", WHEEL.encode())
        wheel.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def _installed(name: str) -> Distribution:
    """The installed distribution: a ``.dist-info`` one (an editable install's, or a wheel's), never a
    stray ``*.egg-info`` folder that a source tree in the current directory puts first on the path."""
    found = [d for d in distributions(name=name) if d.read_text("RECORD") or d.read_text("direct_url.json")]
    if not found:
        raise GcptuiError(f"{name} is not installed here: `pip install -e .` first")
    return next((d for d in found if _editable_root(d)), found[0])


def _editable_root(dist: Distribution) -> Path | None:
    direct = dist.read_text("direct_url.json")
    if not direct:
        return None
    data = json.loads(direct)
    url = str(data.get("url", ""))
    if not (data.get("dir_info") or {}).get("editable") or not url.startswith("file://"):
        return None
    return Path(url.removeprefix("file://"))


def _editable_files(dist: Distribution, name: str) -> dict[str, Path]:
    root = _editable_root(dist)
    assert root is not None
    found: dict[str, Path] = {}
    for prefix, folder in SOURCE_LAYOUT[name].items():
        base = (root / folder).resolve()
        for path in base.rglob("*"):
            relative = path.relative_to(base)
            if not path.is_file() or path.suffix not in KEPT_SUFFIXES:
                continue
            if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in relative.parts[:-1]):
                continue
            found[f"{prefix}/{relative.as_posix()}"] = path
    if not found:
        raise GcptuiError(f"no sources of {name} under {root}: reinstall it with `pip install -e .`")
    return found


def _installed_files(dist: Distribution) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for file in dist.files or []:
        posix = file.as_posix()
        if posix.startswith("..") or ".dist-info/" in posix or "__pycache__" in posix:
            continue
        found[posix] = Path(str(file.locate()))
    return found
