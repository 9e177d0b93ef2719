"""``gcptui init [--force]``: a commented starter ``gcptui.toml`` in the current folder
(``remote/starter_config.py``). An existing file is kept unless ``--force``: a user's config is theirs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gcptui.remote.errors import ConfigError
from gcptui.remote.starter_config import starter_config

FILE_NAME = "gcptui.toml"


def run_init(args: argparse.Namespace) -> int:
    path = Path.cwd() / FILE_NAME
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists: edit it, or `gcptui init --force` to replace it")
    path.write_text(starter_config(), encoding="utf-8")
    print(f"wrote {path}: set [job] command, then run `gcptui`", file=sys.stderr)
    return 0
