"""The keeper's wheelhouse: gcptui and every runtime dependency as wheels for the keeper VM's Python,
gathered on the laptop, so the VM installs with ``pip install --no-index`` and needs no package index.

gcptui's own wheel is zipped from this install (``wheels.py``); its dependencies come from
``pip download --only-binary=:all:`` for the VM's Python version and platform (this machine's
package index or the folders pip is configured with: ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``), kept in
this user's cache for the next deploy with the same requirements and target. The trainer
is not shipped: the keeper runs no training. Which Python the VM has is asked of it (``PROBE``) or,
for a VM deploy is about to make, known from its image (``DEBIAN_12``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from gcptui.remote.errors import GcptuiError
from gcptui.remote.keeper.wheels import build_wheel

COMPLETE = "complete"  # written last into a cache folder: it holds every wheel
OLDEST_GLIBC_MINOR = 17  # manylinux2014: the oldest tag binary wheels still ship
PIP_TIMEOUT = 900.0
# Prints e.g. `3 11 linux x86_64 glibc 2.36`, or `3 12 darwin arm64 14.5` on macOS.
PROBE = (
    "python3 -c 'import platform, sys; v = sys.version_info; "
    'm = platform.mac_ver()[0] if sys.platform == "darwin" else " ".join(platform.libc_ver()); '
    "print(v[0], v[1], sys.platform, platform.machine(), m)'"
)


@dataclass(frozen=True, slots=True)
class Target:
    """A Python version (``3.11``) and the wheel platform tags that install on its machine."""

    python: str
    platforms: tuple[str, ...]

    def describe(self) -> str:
        return f"Python {self.python} on {self.platforms[0]}"


def linux_target(python: str, machine: str, glibc_minor: int) -> Target:
    """Every manylinux tag a glibc 2.``glibc_minor`` machine takes (pip takes a ``--platform`` literally)."""
    tags = [f"manylinux_2_{n}_{machine}" for n in range(glibc_minor, OLDEST_GLIBC_MINOR - 1, -1)]
    return Target(python, (*tags, f"manylinux2014_{machine}"))


# The image deploy makes its VM from (deploy.IMAGE): Debian 12 ships Python 3.11 on glibc 2.36.
DEBIAN_12 = linux_target("3.11", "x86_64", 36)


def parse_probe(text: str) -> Target:
    """The target from ``PROBE``'s line (the VM's text: every field checked, anything else refused)."""
    fields = text.strip().split()
    number = re.compile(r"\d{1,3}")
    if len(fields) < 4 or not (number.fullmatch(fields[0]) and number.fullmatch(fields[1])):
        raise GcptuiError(
            "keeper deploy: the VM's python3 did not say its version: is python3 installed there?"
        )
    python = f"{fields[0]}.{fields[1]}"
    system, machine = fields[2], fields[3]
    if not re.fullmatch(r"[A-Za-z0-9_]{1,20}", machine):
        raise GcptuiError("keeper deploy: the VM's python3 named no machine type")
    if (
        system == "linux"
        and len(fields) == 6
        and fields[4] == "glibc"
        and re.fullmatch(r"2\.\d{1,3}", fields[5])
    ):
        return linux_target(python, machine, int(fields[5].split(".")[1]))
    if system == "darwin" and len(fields) == 5 and re.fullmatch(r"\d{1,2}\.\d{1,2}(\.\d{1,2})?", fields[4]):
        major, minor = fields[4].split(".")[:2]
        return Target(python, (f"macosx_{major}_{minor}_{machine}",))
    raise GcptuiError(
        "keeper deploy: the keeper runs on a Linux VM with glibc (or macOS); this one is neither"
    )


def build_wheelhouse(folder: Path, target: Target) -> list[Path]:
    """gcptui's wheel (in ``folder``) and its dependencies' for ``target``: from this user's cache
    when an earlier deploy gathered the same requirements for the same target, else ``pip download``
    (one-line error if pip cannot) and kept in that cache."""
    own = build_wheel("gcptui", folder)
    cache = _cache(own, target)
    if not (cache / COMPLETE).exists():
        _download(own, target, folder / "download")
        staging = Path(tempfile.mkdtemp(prefix=".new-", dir=_ensure(cache.parent)))
        for wheel in (folder / "download").glob("*.whl"):
            if not wheel.name.startswith("gcptui-"):
                shutil.move(wheel, staging / wheel.name)
        (staging / COMPLETE).write_text("")
        try:
            staging.rename(cache)  # atomic: another deploy's copy, if it got there first, is as good
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return [own, *sorted(cache.glob("*.whl"))]


def _download(own: Path, target: Target, folder: Path) -> None:
    platforms = [arg for tag in target.platforms for arg in ("--platform", tag)]
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", target.python, *platforms, "-d", str(folder), str(own),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise GcptuiError(f"keeper deploy: `pip download` did not run ({err})") from None
    if done.returncode != 0:
        lines = done.stderr.splitlines()
        errors = [line for line in lines if line.startswith("ERROR")] or lines
        tail = errors[-1].removeprefix("ERROR: ").strip()[:300] if errors else "no output"
        raise GcptuiError(
            f"keeper deploy: cannot gather gcptui's dependencies as wheels for {target.describe()} "
            f"({tail}): the keeper's VM installs them from here; reach a package index, or set "
            "PIP_FIND_LINKS to a folder that holds them"
        )


def _cache(own: Path, target: Target) -> Path:
    """This user's cache folder for the dependencies of ``own`` (its Requires-Dist) on ``target``."""
    import platformdirs

    with zipfile.ZipFile(own) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(name).decode())
    requires = sorted(metadata.get_all("Requires-Dist") or [])
    key = hashlib.sha256(json.dumps([target.python, target.platforms, requires]).encode()).hexdigest()[:20]
    return platformdirs.user_cache_path("gcptui") / "keeper-wheels" / key


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
