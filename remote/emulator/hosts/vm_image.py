"""What an emulated VM's boot image holds: two Pythons, no package index, no sudo.

- ``python3`` is the OS's interpreter, as Debian 12's ``/usr/bin/python3``: the standard library and
  nothing else. Here a venv of the laptop's base interpreter made without its site-packages (one per
  emulator directory, shared by every VM like an image), so nothing the laptop installed leaks in.
- ``python`` is the image's machine-learning environment, as a Deep Learning VM image ships one with
  torch: here the laptop's own interpreter, so the reference trainer's jobs (``python -m
  gcptui_trainer``) run as they would there.
- No package index: pip's configuration is none (not the laptop's) and ``PIP_NO_INDEX`` is set, so
  ``pip install`` on a VM takes only what was copied to it (the keeper's wheelhouse).
- ``sudo`` refuses (the emulator is not root): whatever wants root on a VM takes its no-root path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SUDO = '#!/bin/sh\necho "sudo: a password is required" >&2\nexit 1\n'


def image_environment() -> dict[str, str]:
    """What every VM process's environment carries for the image: no pip configuration, no index."""
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}


def prepare_image(root: Path) -> Path:
    """The image's ``bin`` folder, ``root/bin`` (made once, kept while its interpreter is current):
    ``python3`` (the bare interpreter: ``root`` is its venv, so Python finds ``root/pyvenv.cfg``
    beside it; a link from elsewhere would not) and ``sudo`` (refusing); no ``python``, so that name
    falls through to the ML environment further down a VM's PATH."""
    bin_dir = root / "bin"
    if not _current(root):
        # --without-pip: Debian's python3 has no pip either; `python3 -m venv` still makes venvs with pip
        # (ensurepip is in the standard library here, where Debian puts it in python3-venv).
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", "--without-pip", str(root)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        for extra in bin_dir.glob("activate*"):
            extra.unlink()
        # venv makes ``python`` the link to the base and ``python3`` a link to ``python``: ``python3``
        # takes the base's own target, so ``python`` can go and fall through to the ML environment.
        python = bin_dir / "python"
        target = os.readlink(python) if python.is_symlink() else None
        if target is not None:
            (bin_dir / "python3").unlink(missing_ok=True)
            (bin_dir / "python3").symlink_to(target)
        python.unlink(missing_ok=True)
        sudo = bin_dir / "sudo"
        sudo.write_text(SUDO)
        sudo.chmod(0o755)
    return bin_dir


def _current(venv: Path) -> bool:
    """The venv exists and was made from this very base interpreter (the laptop's may have changed)."""
    try:
        config = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return False
    base = getattr(sys, "_base_executable", sys.executable)
    return (venv / "bin" / "python3").exists() and f"home = {os.path.dirname(base)}" in config
