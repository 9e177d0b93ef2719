"""The demo's source tree and job: a small project whose training job is the reference trainer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gcptui.remote.emulator import toy_train
from gcptui.remote.emulator.storage.fake_gcs import storage_settings

DEMO_PROJECT = "gcptui-demo"  # the emulator's project (``Emulator``'s default)

# A fresh run gets a directory of its own named by its UTC start time (runs/demo-20261123-131500), so
# it never meets an earlier run's checkpoints, on this disk or in the bucket; a finished job can be run
# again. runs/current names the run that --resume (keep-alive after a preemption, R in the TUI)
# continues; without it (a VM recreated on an empty disk) the newest run on disk, else the newest in the
# checkpoint bucket, whose folders carry the same names (nothing printed when none is reachable).
TRAIN_SH = """#!/bin/sh
newest_in_bucket() {
  [ -n "${GCPTUI_CHECKPOINT_URL:-}" ] || return 0
  python -c '
import os
from gcptui_trainer.mirror import BucketUrl, storage_client
url = BucketUrl.parse(os.environ["GCPTUI_CHECKPOINT_URL"])
prefix = url.prefix + "/" if url.prefix else ""
listing = storage_client().bucket(url.bucket).list_blobs(prefix=prefix, delimiter="/")
for _ in listing: pass
runs = [p[len(prefix):].strip("/") for p in listing.prefixes]
print(max(("runs/" + r for r in runs if r.startswith("demo-")), default=""))
' 2>/dev/null
}
mkdir -p runs
run=
case " $* " in
*" --resume "*)
  run=$(cat runs/current 2>/dev/null)
  [ -n "$run" ] || run=$(ls -d runs/demo-* 2>/dev/null | sort | tail -n 1)
  [ -n "$run" ] || run=$(newest_in_bucket)
  ;;
esac
if [ -z "$run" ]; then
  stamp=$(date -u +%Y%m%d-%H%M%S)
  run="runs/demo-$stamp"
  n=1
  while [ -e "$run" ]; do n=$((n + 1)); run="runs/demo-$stamp-$n"; done
fi
echo "$run" > runs/current
echo "run directory: $run"
exec python {module} --run-dir "$run" "$@"
"""

DEMO_FILES = {
    "README.md": "# demo project\n\nEdit any file here: gcptui syncs it to every VM as you save.\n",
    "train.sh": TRAIN_SH,
    "config/train.toml": 'steps = 3000\nsize = "tiny"\n',
    ".gitignore": "runs/\n__pycache__/\n",
}

# The job the demo starts: the reference trainer, slowed down so a run lasts a watchable while. The
# emulated VMs run the interpreter gcptui runs under: where torch or the gcptui-trainer distribution is
# missing there, a torch-free toy run (same protocol, same checkpoint and resume behaviour) stands in,
# written into the project as its own file so it travels to the VMs by sync like any user's code.
TRAIN_ARGS = "--steps 3000 --checkpoint-every 100 --log-every 5 --step-delay 0.05"

DEMO_JOB = """
[sync]
source = "project"
dest = "~/project"
protect = ["runs/"]

[job]
command = "sh train.sh {args}"
resume = "sh train.sh {args} --resume"
stop_grace_seconds = 8

[keepalive]
enabled = true
poll_seconds = 3
max_restarts = 5
"""


def write_demo_project(directory: Path, config_path: Path, storage: tuple[str, str] | None = None) -> Path:
    """Create ``directory/project`` and append the demo's sync, job and keep-alive settings;
    ``storage`` (bucket URL, STORAGE_EMULATOR_HOST) turns checkpoint mirroring on."""
    project = directory / "project"
    torch = all(importlib.util.find_spec(name) is not None for name in ("torch", "gcptui_trainer"))
    module = "-m gcptui_trainer" if torch else "toy_train.py"
    # Always there (a few kB), so a sweep or a Vertex AI job of the tour (docs/EMULATOR.md) can run it.
    (project / "toy_train.py").parent.mkdir(parents=True, exist_ok=True)
    (project / "toy_train.py").write_text((Path(toy_train.__file__)).read_text())
    for relative, text in DEMO_FILES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{module}", module))
    (project / "train.sh").chmod(0o755)
    with config_path.open("a") as config:
        config.write(DEMO_JOB.format(args=TRAIN_ARGS + (" --size tiny" if torch else "")))
        if storage is not None:
            config.write(storage_settings(*storage, DEMO_PROJECT))
    return project


# `gcptui demo --sweep`: a small random search with the reference trainer over the running demo VMs
# (the torch-free toy run stands in for it, sweeping the learning rate alone, where torch is missing).
DEMO_SWEEP = """name = "demo-sweep"
command = "python {module} --run-dir {{run_dir}} --steps 200 --log-every 10 --checkpoint-every 50 --step-delay 0.05 --lr {{lr}}{extra} --resume"
metric = "{metric}"
goal = "min"
search = "random"
seed = 0
count = 8
vms = {vms}
at_end = "none"
keepalive = false

[params.lr]
kind = "log_uniform"
low = 1e-3
high = 3e-2
"""

DEMO_SWEEP_BATCH = """
[params.batch_size]
kind = "list"
values = [4, 8, 16]
"""


def write_demo_sweep(directory: Path, vms: list[str]) -> Path:
    """``directory/sweep.toml``: the demo's sweep over ``vms`` (the demo's running VMs)."""
    torch = all(importlib.util.find_spec(name) is not None for name in ("torch", "gcptui_trainer"))
    text = DEMO_SWEEP.format(
        module="-m gcptui_trainer" if torch else "toy_train.py",
        extra=" --batch-size {batch_size} --eval-every 50 --size tiny" if torch else "",
        metric="val_loss" if torch else "loss",
        vms="[" + ", ".join(f'"{vm}"' for vm in vms) + "]",
    )
    path = directory / "sweep.toml"
    path.write_text(text + (DEMO_SWEEP_BATCH if torch else ""))
    return path
