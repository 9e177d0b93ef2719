"""mypy over the packages as they install: gcptui.tui, gcptui.remote and gcptui_trainer.

The repository's folders (tui/, remote/, trainer/) are mapped to those names by setuptools'
package-dir, which mypy cannot follow; a throwaway folder of symlinks gives it the installed layout.
Usage: python scripts/typecheck.py [extra mypy arguments]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = {"gcptui/tui": "tui", "gcptui/remote": "remote", "gcptui_trainer": "trainer"}


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="gcptui-typecheck-") as view:
        for installed, folder in LAYOUT.items():
            link = Path(view) / installed
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(ROOT / folder, target_is_directory=True)
        env = {**os.environ, "MYPYPATH": view}
        command = [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "-p",
            "gcptui.tui",
            "-p",
            "gcptui.remote",
            "-p",
            "gcptui_trainer",
            *argv,
        ]
        return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
