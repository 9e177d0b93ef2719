"""The demo's source tree and job: a small project whose training job is the reference trainer."""

from __future__ import annotations

from pathlib import Path

DEMO_FILES = {
    "README.md": "# demo project\n\nEdit any file here: gcptui syncs it to every VM as you save.\n",
    "train.sh": "#!/bin/sh\nexec python -m trainer \"$@\"\n",
    "config/train.toml": "steps = 3000\nsize = \"tiny\"\n",
    ".gitignore": "runs/\n__pycache__/\n",
}

# The job the demo starts: the reference trainer, slowed down so a run lasts a watchable while.
DEMO_JOB = """
[sync]
source = "project"
dest = "~/project"
protect = ["runs/"]

[job]
command = "sh train.sh --run-dir runs/demo --steps 3000 --size tiny --checkpoint-every 100 --log-every 10 --step-delay 0.05"
resume = "sh train.sh --run-dir runs/demo --steps 3000 --size tiny --checkpoint-every 100 --log-every 10 --step-delay 0.05 --resume"
stop_grace_seconds = 8

[keepalive]
enabled = true
poll_seconds = 3
max_restarts = 5
"""


def write_demo_project(directory: Path, config_path: Path) -> Path:
    """Create ``directory/project`` and append the demo's sync, job and keep-alive settings."""
    project = directory / "project"
    for relative, text in DEMO_FILES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (project / "train.sh").chmod(0o755)
    with config_path.open("a") as config:
        config.write(DEMO_JOB)
    return project
