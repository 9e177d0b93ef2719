"""What runs on the fleet and how it is watched: ``[sync]``, ``[job]``, ``[storage]``, ``[keepalive]``, ``[logs]``, ``[gpu]``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator

from gcptui.remote.config.base import _Section

# A shell variable name: the job's environment becomes `export NAME=...` lines the supervisor sources.
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"


def check_env_names(env: dict[str, str]) -> dict[str, str]:
    """``env`` unchanged when every name is a shell variable name: they become `export NAME=...`
    lines the VM's supervisor sources, where a name cannot be quoted."""
    for name in env:
        if not re.fullmatch(ENV_NAME_PATTERN, name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    return env


class SyncConfig(_Section):
    """Live sync: the local tree mirrored to ``dest`` on each machine, as files are saved.

    Sync never deletes or overwrites on the VM what it did not put there (its ledger lives in
    ``~/.gcptui/sync/``), and never touches protected paths.

    On the local machine each session keeps what the VM's ``dest`` held when it ended (``sync-views/``
    in the user cache directory, ``platformdirs.user_cache_path("gcptui")``: ``~/.cache/gcptui/`` on
    Linux; one file per VM host key, user and ``dest``), so the next session, another ``gcptui``
    command included, resyncs with a digest instead of the VM's whole listing. It is only a cache:
    deleting it costs one listing, and a saved view is used only when the VM confirms it holds
    exactly that. Views not written for 30 days are dropped.
    """

    source: str | None = Field(
        default=None,
        description=(
            "The local folder to mirror. Not written: the current directory. Written: `~` is expanded, and a "
            "relative path resolves against the folder of the config file (not the current directory). "
            "Its `.gitignore` files, `.git/info/exclude` and `exclude` decide what is synced; `.git/` never "
            "is. Every sync says `SOURCE → NAME:DEST`."
        ),
    )
    dest: str = Field(
        default="~/project",
        description=(
            "The folder on each machine that receives the tree and where the job runs. `~/x` and relative "
            "paths are under the remote home; absolute paths are used as they are. Must not be `/`, `~`, "
            "`.`, `$HOME` or empty, and must not contain `..`."
        ),
    )
    exclude: list[str] = Field(
        default=[],
        description=(
            "More gitignore-syntax patterns, relative to `source`, that are not synced. They override the "
            "tree's own ignore files, so `!pattern` can re-include a git-ignored file."
        ),
    )
    protect: list[str] = Field(
        default=[],
        description=(
            "Gitignore-syntax patterns, relative to `dest`, that sync never writes, replaces or deletes "
            "(with everything below a matching folder; `runs/**` covers the folder `runs` too): what "
            "training writes on the VM, e.g. `runs/`."
        ),
    )
    allow_secrets: list[str] = Field(
        default=[],
        description=(
            "Gitignore-syntax patterns, relative to `source`, of files that sync, `vertex submit` and the keeper's "
            "copy send although the credentials guard would hold them back: private keys (`id_*` without `.pub`, "
            "`*.pem`, `*.p12`, `*.pfx`, a `-----BEGIN ... PRIVATE KEY-----` anywhere in a file of up to 64 KiB), "
            "`.env*`, `.netrc`, `.git-credentials`, `.pypirc`, `*credentials*` files, Google `authorized_user` and "
            "`service_account` JSON, refresh tokens, AWS secret keys, kubeconfigs holding a token, and anything "
            "under `.config/gcloud/`, `.aws/`, `.azure/`, `.kube/`. A held-back file is named once and the rest "
            "syncs; a source holding the config's own SSH key is refused whole (the wrong folder)."
        ),
    )
    stall_seconds: StrictFloat = Field(
        default=30.0,
        gt=0,
        description=(
            "How long the sync agent on the VM may stop taking or sending data in the middle of a transfer "
            "before it counts as lost: `sync --once` then fails with one line, follow mode reconnects."
        ),
    )

    @field_validator("dest")
    @classmethod
    def _dest_is_not_a_root(cls, value: str) -> str:
        normal = value.strip().rstrip("/")
        if normal in ("", "~", ".", "$HOME", "${HOME}") or normal == "/" or value.strip() == "/":
            raise ValueError(
                f"{value!r} would mirror onto the whole remote root or home: use a project directory "
                "such as '~/project'"
            )
        if ".." in Path(normal.removeprefix("~/")).parts:
            raise ValueError(f"{value!r} must not contain '..': name the directory directly")
        return value.strip()


class JobConfig(_Section):
    """The training job: run detached on the VM by the job supervisor, in ``[sync].dest``, as
    ``sh -c COMMAND``; its output is appended to ``~/.gcptui/job/output.log``."""

    setup: str = Field(
        default="",
        description=(
            "A shell command run in `[sync].dest` before the job's command, once per disk: once it "
            "succeeds, `~/.gcptui/setup.done` is written and later starts skip it (delete that file to run "
            "it again). If it fails, the command is not started. Empty: no setup."
        ),
    )
    command: str = Field(
        default="",
        description="The training command (`job start`, `s` in the TUI), run with `sh -c` in `[sync].dest`. Required to start a job.",
    )
    resume: str = Field(
        default="",
        description=(
            "The command that continues a run: `job restart`, `R`, and keep-alive's relaunch after a "
            "preemption. Empty: `command`."
        ),
    )
    env: dict[str, str] = Field(
        default={},
        description=(
            "Environment variables exported to the job (after gcptui's own, which they may override). "
            "Names must match `[A-Za-z_][A-Za-z0-9_]*`. A relative `GCPTUI_METRICS` is relative to `[sync].dest`. "
            "Values (API tokens) travel over the SSH channel's stdin into `~/.gcptui/job/env` (mode 0600), "
            "never on a command line where `ps` would show them."
        ),
    )
    stop_grace_seconds: StrictFloat = Field(
        default=30.0,
        ge=0,
        description=(
            "Seconds `job kill` and `job restart` wait after SIGTERM to the job's process group before "
            "SIGKILL (sent in tenths of a second)."
        ),
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env_names(value)

    @property
    def resume_command(self) -> str:
        return self.resume or self.command


class StorageConfig(_Section):
    """Cloud Storage for checkpoints that outlive the VM (the trainer library mirrors them there)."""

    bucket: str = Field(
        default="",
        description=(
            "`gs://BUCKET[/PREFIX]`. Set: every job gets `GCPTUI_CHECKPOINT_URL=<bucket>/<VM name>`, and "
            "a run using the trainer library copies each durable checkpoint (and artifact) to "
            "`<bucket>/<VM name>/<run directory name>/`, resuming from there on a fresh disk. Empty: off."
        ),
    )

    emulator_host: str = Field(
        default="",
        description=(
            "A Cloud Storage emulator's address (`http://HOST:PORT`, what `gcptui emulator` writes): "
            "gcptui's own storage clients (checkpoint pulls, sweeps, the keep-alive lease, Vertex AI "
            "packages) and the keeper it deploys use it, as if `STORAGE_EMULATOR_HOST` were exported "
            "(an exported one wins). Jobs take theirs from `[job.env]`. Empty: Google's Cloud Storage."
        ),
    )

    @field_validator("emulator_host")
    @classmethod
    def _emulator_host_is_a_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not re.fullmatch(r"https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an address: write it as http://HOST:PORT")
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket_is_a_gs_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and (not value.startswith("gs://") or len(value) <= len("gs://")):
            raise ValueError(
                f"{value!r} is not a Cloud Storage URL: write it as gs://BUCKET or gs://BUCKET/PREFIX"
            )
        return value

    def checkpoint_url(self, vm: str) -> str | None:
        """The GCPTUI_CHECKPOINT_URL of VM `vm`'s jobs (None without a bucket)."""
        return f"{self.bucket}/{vm}" if self.bucket else None


class KeepaliveConfig(_Section):
    """Keep-alive: notice a Spot VM's preemption, restart (or recreate) it, and relaunch
    ``[job].resume`` once it runs again. Needs ``[gcp]``."""

    enabled: StrictBool = Field(
        default=False,
        description=(
            "In the TUI, watch every Spot VM from the start; false: none until switched on per VM (`a`). "
            "The headless `gcptui keepalive` always watches and ignores this key."
        ),
    )
    poll_seconds: StrictFloat = Field(
        default=10.0,
        gt=0,
        description=(
            "Seconds between fleet polls (one list call). A VM suspected of going down (a preemption "
            "notice, a lost connection) is polled every second until GCE reports it stopped."
        ),
    )
    max_restarts: StrictInt = Field(
        default=20,
        ge=0,
        description=(
            "Recoveries keep-alive starts per VM before it gives up on it; relaunching by hand (`L`) and "
            "switching keep-alive back on reset the count."
        ),
    )
    restart_idle: StrictBool = Field(
        default=False,
        description=(
            "Restart a preempted VM whose job has nothing to resume (it had finished, was killed by the "
            "user, or never started). False: such a VM is left stopped (`left stopped` in the timeline); "
            "its job is never started by a preemption either way."
        ),
    )
    failover_after: StrictFloat = Field(
        default=0.0,
        ge=0,
        description=(
            "Seconds of stock-outs (the zone has no capacity) after which a VM that keep-alive recreates "
            "(termination action DELETE: its disk is gone anyway) is recreated in the next zone of `zones` "
            "instead, same machine type, GPUs and Spot; it resumes from `[storage] bucket`. 0: never move. "
            "A STOP-action VM keeps its disk (and checkpoints) and is never moved."
        ),
    )
    lease: StrictBool = Field(
        default=True,
        description=(
            "With `[storage] bucket`: take the recovery lease in the bucket, so that only one keep-alive (this "
            "laptop or the keeper, `gcptui keeper`) recovers each preemption. False: recover without asking "
            "anyone (no keeper deployed for this bucket). Should the lease be out of reach (credentials, "
            "network), keep-alive recovers without it unless a keeper is known for the bucket, and then "
            "says `recovery paused` with the reason."
        ),
    )
    zones: list[str] = Field(
        default=[],
        description=(
            'Zones to fail over to, in order of preference (e.g. `["us-central1-b", "us-east1-c"]`). '
            "In another region the VM's subnetwork is taken by the same name there (auto-mode networks "
            "such as `default` have one in every region)."
        ),
    )


class LogsConfig(_Section):
    """Following the job's output (``gcptui logs``, the TUI's logs screen)."""

    history_lines: StrictInt = Field(
        default=200,
        ge=0,
        description="Lines already in a log shown before following it; the default of `gcptui logs -n`.",
    )
    buffer_lines: StrictInt = Field(
        default=10_000,
        ge=100,
        description="Lines each pane of the TUI's logs screen keeps; the oldest fall out beyond it.",
    )
    files: list[str] = Field(
        default=[],
        description=(
            "Extra remote files to tail beside the job's output, e.g. `~/project/runs/train.log`; `~/` "
            "and relative paths are under the remote home. Each is one more pane (or `name:file` prefix)."
        ),
    )


class GpuConfig(_Section):
    """The idle-GPU warning: a running VM whose GPUs do nothing is burning money."""

    idle_util_percent: StrictFloat = Field(
        default=5.0,
        ge=0,
        le=100,
        description="GPU utilization, in percent, at or below which a GPU counts as idle.",
    )
    idle_minutes: StrictFloat = Field(
        default=5.0,
        gt=0,
        description="Minutes every GPU of a running VM must stay idle before the TUI warns once.",
    )


class AutostopConfig(_Section):
    """Auto-stop: a VM that costs money for nothing (idle GPUs and no job, or a job that finished) is
    warned about, then stopped. Works in the TUI and in `gcptui keepalive`; never touches a VM whose
    job runs or that keep-alive is recovering."""

    idle_minutes: StrictFloat = Field(
        default=0.0,
        ge=0,
        description=(
            "Minutes a running VM may sit with no job running (in any job slot: a sweep's trials count) and every GPU at or below "
            "`[gpu].idle_util_percent` (a VM without GPUs: no job alone) before the warning; 0: off."
        ),
    )
    after_job: Literal["stop", "delete", "none"] = Field(
        default="none",
        description=(
            'What to do with a VM once its job ends with exit code 0: "stop" it, "delete" it (with its '
            'boot disk), or "none".'
        ),
    )
    warn_seconds: StrictFloat = Field(
        default=120.0,
        ge=0,
        description=(
            "Seconds between the warning (a notification and a countdown) and the action; the job "
            "starting again, the GPUs getting busy, the VM stopping, or any key on that VM in the TUI "
            "cancels it."
        ),
    )

    @property
    def active(self) -> bool:
        return self.idle_minutes > 0 or self.after_job != "none"


class NotifyConfig(_Section):
    """Where keep-alive tells of recoveries when nobody watches (the laptop closed, the keeper alone)."""

    webhook: str = Field(
        default="",
        description=(
            "An http(s) URL: each recovery done, failed or given up is POSTed to it as a JSON object "
            "(`event`, `outcome`, `machine`, `at`, `detail`, and a `text` line that chat webhooks show). Empty: off."
        ),
    )

    @field_validator("webhook")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError("must start with https:// (or http://)")
        return value
