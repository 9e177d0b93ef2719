"""The starter ``gcptui.toml`` that ``gcptui init`` writes: every line a user changes first, commented,
with gcloud's current project and zone (``gcloud config set project|compute/zone``) where it has them."""

from __future__ import annotations

import json

from gcptui.remote.cloud.gcloud_config import resolve_default_zone, resolve_project


def starter_config(project: str | None = None, zone: str | None = None) -> str:
    """The starter file's text, from ``project`` and ``zone`` (default: gcloud's current ones)."""
    project = project if project is not None else resolve_project()
    zone = zone if zone is not None else resolve_default_zone()
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
