"""``gcptui init [--force]``: a commented starter ``gcptui.toml`` in the current folder.

The project and zone are gcloud's current ones (``gcloud config set project|compute/zone``), read from
its configuration files as gcptui reads them everywhere else; a value gcloud has not set is left as a
comment saying how to set it. An existing file is kept unless ``--force``: a user's config is theirs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gcptui.remote.errors import ConfigError
from gcptui.remote.services import gcloud_defaults

FILE_NAME = "gcptui.toml"


def starter_config(project: str | None, zone: str | None) -> str:
    """The starter file's text: every line a user changes first, commented."""
    q = json.dumps  # a TOML basic string, quoted and escaped
    project_line = (
        f"project = {q(project)}  # gcloud's current project"
        if project
        else '# project = "my-project"  # gcloud has none set: `gcloud config set project ID`'
    )
    zones_line = (
        f"zones = [{q(zone)}]  # gcloud's current zone; [] lists every zone"
        if zone
        else '# zones = ["us-central1-a"]  # left out: every zone'
    )
    return f"""\
# gcptui.toml: written by `gcptui init`. Every key and its default: docs/REFERENCE.md.

[gcp]
{project_line}
{zones_line}

[sync]
# The local folder mirrored to each machine as you save (default: this folder), and where it lands.
# source = "."
dest = "~/project"

[job]
# The training command, run with `sh -c` in [sync] dest: `gcptui job start NAME`, `s` in the TUI.
# command = "python train.py"
# What continues a run (restart, and keep-alive after a preemption); empty: the command.
# resume = "python train.py --resume"

[keepalive]
# Watch every Spot VM from the start: restart it after a preemption and relaunch [job] resume.
enabled = false
"""


def run_init(args: argparse.Namespace) -> int:
    path = Path.cwd() / FILE_NAME
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists: edit it, or `gcptui init --force` to replace it")
    path.write_text(starter_config(*gcloud_defaults()), encoding="utf-8")
    print(f"wrote {path}: set [job] command, then run `gcptui`", file=sys.stderr)
    return 0
