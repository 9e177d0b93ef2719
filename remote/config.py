"""The ``gcptui.toml`` file of docs/REFERENCE.md, validated with pydantic.

Every mistake becomes one ``ConfigError`` line naming the file, the line, the key and what to do.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gcptui.remote.errors import ConfigError

CONFIG_NAME = "gcptui.toml"

Port = Annotated[int, Field(ge=1, le=65535)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GcpConfig(_Section):
    """Google Compute Engine: which project's instances make up the fleet, and where the API is.

    With no config file at all, GCE is used with the ambient project. In a file, leaving the
    section out turns GCE off: the fleet is only the static ``[[hosts]]``. An empty ``[gcp]``
    turns it on with every default.
    """

    project: str | None = Field(
        default=None,
        description=(
            "The Google Cloud project id whose instances are listed. Left out: as gcloud resolves it "
            "(`CLOUDSDK_CORE_PROJECT`, then the active gcloud configuration's `core/project`), then "
            "`GOOGLE_CLOUD_PROJECT`; one warning line when those disagree. Must not be empty when given."
        ),
    )
    zones: list[str] = Field(
        default=[],
        description=(
            "Zones to list, each a zone name such as `us-central1-a`. Empty: every zone, in one "
            "aggregated list call; otherwise one list call per zone (in parallel)."
        ),
    )
    api_endpoint: str = Field(
        default="",
        description=(
            "Override of the Compute API endpoint, starting with `http://` or `https://` (a trailing `/` "
            "is dropped). Empty: `https://compute.googleapis.com`. A plain-http loopback endpoint (the "
            "emulator) is used without Google credentials."
        ),
    )
    access_token_file: str = Field(
        default="",
        description=(
            "A file holding a bearer token sent on every Compute call instead of Google credentials (the "
            "emulator writes one; gcloud's `auth/access_token_file` works the same way). Relative paths "
            "resolve against the config file's folder. Empty: Application Default Credentials."
        ),
    )

    @field_validator("project")
    @classmethod
    def _project_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(
                "is empty: set it to your project id, or remove the key to use GOOGLE_CLOUD_PROJECT "
                "or the gcloud config"
            )
        return value

    @field_validator("zones")
    @classmethod
    def _zones_look_like_zones(cls, value: list[str]) -> list[str]:
        for zone in value:
            if not re.fullmatch(r"[a-z]+-[a-z]+\d+-[a-z]", zone):
                raise ValueError(f"{zone!r} is not a zone name like 'us-central1-a'")
        return value

    @field_validator("api_endpoint")
    @classmethod
    def _endpoint_has_scheme(cls, value: str) -> str:
        if value and not re.match(r"https?://[^/]+", value):
            raise ValueError(f"{value!r} must start with http:// or https://, e.g. http://127.0.0.1:8085")
        return value.rstrip("/")


class SshConfig(_Section):
    """How every GCE instance is reached over SSH (static ``[[hosts]]`` may override user, key and
    known_hosts). Local paths expand ``~`` and resolve against the config file's folder."""

    user: str = Field(
        default="",
        description="The SSH login user. Empty: the local user name, gcloud's rule (OS Login users set theirs).",
    )
    key: str = Field(
        default="~/.ssh/google_compute_engine",
        description=(
            "Private key file (gcloud's by default). Empty: the SSH agent and `~/.ssh/id_*`. A relative "
            "path resolves against the config file's folder."
        ),
    )
    known_hosts: str = Field(
        default="~/.ssh/google_compute_known_hosts",
        description=(
            "OpenSSH known-hosts file that host keys are checked against (gcloud's by default; GCE VMs "
            "are looked up under the alias `compute.<instance id>`). Unknown or changed keys are refused; "
            "`gcptui ssh accept` adds one. A relative path resolves against the config file's folder."
        ),
    )
    proxy_command: str = Field(
        default="",
        description=(
            "A command whose stdin/stdout carry the SSH connection, e.g. an IAP tunnel; `{name}`, `{zone}` "
            "and `{port}` are replaced with the instance's. Used for GCE instances only (it also reaches "
            "VMs without any IP address). Empty: connect directly to the external IP, else the internal IP."
        ),
    )
    port: Port = Field(
        default=22,
        description=(
            "sshd port of GCE instances; an instance label `gcptui-ssh-port=N` overrides it per VM (the "
            "emulator sets this key for its own VMs)."
        ),
    )
    connect_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds to wait for one SSH connection attempt (TCP connect and handshake).",
    )
    keepalive_seconds: float = Field(
        default=15.0,
        ge=0,
        description=(
            "Seconds between SSH keepalive probes on each pooled connection, so a dead link is noticed "
            "and reconnected; 0 turns the probes off."
        ),
    )


class HostConfig(_Section):
    """One static machine reached by SSH alone (an entry of the ``[[hosts]]`` array of tables).

    It has no VM lifecycle (``vm`` refuses it, keep-alive ignores it) and is always treated as
    reachable; empty user, key and known_hosts fall back to ``[ssh]``.
    """

    name: str = Field(
        min_length=1,
        description="The name the fleet table and the commands use; unique among `[[hosts]]`.",
    )
    address: str = Field(min_length=1, description="Host name or IP address to connect to.")
    port: Port = Field(default=22, description="Its sshd port.")
    user: str = Field(default="", description="Login user. Empty: `[ssh].user`, then the local user name.")
    key: str = Field(
        default="",
        description=(
            "Private key file. Empty: `[ssh].key`. A relative path resolves against the config file's folder."
        ),
    )
    known_hosts: str = Field(
        default="",
        description=(
            "Known-hosts file; the key is looked up under `address` (`[address]:port` off port 22). "
            "Empty: `[ssh].known_hosts`. `[ssh].proxy_command` does not apply: a jump host goes in "
            "`~/.ssh/config`."
        ),
    )


class SyncConfig(_Section):
    """Live sync: the local tree mirrored to ``dest`` on each machine, as files are saved.

    Sync never deletes or overwrites on the VM what it did not put there (its ledger lives in
    ``~/.gcptui/sync/``), and never touches protected paths.
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
            "(with everything below a matching folder): what training writes on the VM, e.g. `runs/`."
        ),
    )
    allow_secrets: list[str] = Field(
        default=[],
        description=(
            "Paths, relative to `source`, of private-key files that may be synced anyway. Without them sync "
            "refuses a source holding the config's own SSH key or any file that looks like a private key "
            "(`-----BEGIN ... PRIVATE KEY-----`, `id_*` without `.pub`), naming the file."
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
    stop_grace_seconds: float = Field(
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
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return value

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

    enabled: bool = Field(
        default=False,
        description=(
            "In the TUI, watch every Spot VM from the start; false: none until switched on per VM (`a`). "
            "The headless `gcptui keepalive` always watches and ignores this key."
        ),
    )
    poll_seconds: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Seconds between fleet polls (one list call). A VM suspected of going down (a preemption "
            "notice, a lost connection) is polled every second until GCE reports it stopped."
        ),
    )
    max_restarts: int = Field(
        default=20,
        ge=0,
        description=(
            "Recoveries keep-alive starts per VM before it gives up on it; relaunching by hand (`L`) and "
            "switching keep-alive back on reset the count."
        ),
    )
    restart_idle: bool = Field(
        default=False,
        description=(
            "Restart a preempted VM whose job has nothing to resume (it had finished, was killed by the "
            "user, or never started). False: such a VM is left stopped (`left stopped` in the timeline); "
            "its job is never started by a preemption either way."
        ),
    )


class LogsConfig(_Section):
    """Following the job's output (``gcptui logs``, the TUI's logs screen)."""

    history_lines: int = Field(
        default=200,
        ge=0,
        description="Lines already in a log shown before following it; the default of `gcptui logs -n`.",
    )
    buffer_lines: int = Field(
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

    idle_util_percent: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="GPU utilization, in percent, at or below which a GPU counts as idle.",
    )
    idle_minutes: float = Field(
        default=5.0,
        gt=0,
        description="Minutes every GPU of a running VM must stay idle before the TUI warns once.",
    )


class Config(_Section):
    """The whole ``gcptui.toml``: one table per section below, every one optional."""

    gcp: GcpConfig | None = Field(
        default=None,
        description="Google Compute Engine settings; see the section's note on leaving it out.",
    )
    ssh: SshConfig = Field(default=SshConfig(), description="SSH settings for GCE instances.")
    hosts: list[HostConfig] = Field(default=[], description="Static machines reached by SSH alone.")
    sync: SyncConfig = Field(default=SyncConfig(), description="Live sync of the local tree.")
    job: JobConfig = Field(default=JobConfig(), description="The training job.")
    keepalive: KeepaliveConfig = Field(default=KeepaliveConfig(), description="Preemption recovery.")
    storage: StorageConfig = Field(default=StorageConfig(), description="Checkpoints in Cloud Storage.")
    logs: LogsConfig = Field(default=LogsConfig(), description="Log following.")
    gpu: GpuConfig = Field(default=GpuConfig(), description="The idle-GPU warning.")
    keys: dict[str, str] = Field(
        default={},
        description=(
            'Key bindings: action id = key, overriding the default keymap, e.g. `"fleet.refresh" = '
            '"ctrl+r"`. Keys are named as Textual names them (`ctrl+r`, `question_mark`); several keys are '
            "comma-separated. An unknown id or an empty key stops the TUI with an error."
        ),
    )

    # Set by parse_config to the file it read (None: built-in defaults); never read from the file.
    path: Path | None = Field(
        default=None,
        exclude=True,
        description="Where the file was read from (None: built-in defaults); relative paths resolve against its folder.",
    )

    @model_validator(mode="after")
    def _host_names_unique(self) -> Config:
        seen: set[str] = set()
        for host in self.hosts:
            if host.name in seen:
                raise ValueError(f"host name {host.name!r} appears twice in [[hosts]]: names must be unique")
            seen.add(host.name)
        return self

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def sync_source(self) -> Path:
        """``[sync].source``: relative to the config file's folder when written relative, the
        current directory when not written at all (the project one runs gcptui from)."""
        if self.sync.source is None:
            return Path.cwd()
        return self.resolve_local(self.sync.source)

    def resolve_local(self, value: str) -> Path:
        """A local path from the file: ``~`` expanded, relative to the config file's folder."""
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else (self.base_dir / path)


def default_config_paths() -> list[Path]:
    """Where ``gcptui`` looks when ``--config`` is not given, first match wins."""
    return [Path.cwd() / CONFIG_NAME, platformdirs.user_config_path("gcptui") / CONFIG_NAME]


def find_config(explicit: str | os.PathLike[str] | None) -> Path | None:
    """The file to read: the explicit one (which must exist), else the first default that exists."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"{path}: no such config file: check --config, or run without it to use the defaults"
            )
        return path
    for path in default_config_paths():
        if path.is_file():
            return path
    return None


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate the config; with no file anywhere, GCE with the ambient project is used."""
    path = find_config(explicit)
    if path is None:
        return Config(gcp=GcpConfig())
    return parse_config(path.read_text(encoding="utf-8"), path)


def parse_config(text: str, path: Path) -> Config:
    """Validate TOML text; errors name ``path:line`` and the dotted key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}): fix the syntax") from None
    try:
        return Config.model_validate({**data, "path": path})
    except ValidationError as err:
        first = err.errors()[0]
        raise ConfigError(_describe(first, text, path)) from None


def _describe(error: Any, text: str, path: Path) -> str:
    loc = [part for part in error["loc"] if part != "path"]
    dotted = _dotted(loc)
    line = _line_of(text, loc)
    where = f"{path}:{line}" if line else str(path)
    kind = error["type"]
    if kind == "extra_forbidden":
        section = _dotted(loc[:-1]) or "the top level"
        return f"{where}: unknown key '{dotted}': remove it or check its spelling (allowed keys in {section} are listed in docs/REFERENCE.md)"
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        return f"{where}: '{dotted}' is required: add it"
    if not dotted:
        return f"{where}: {message}"
    return (
        f"{where}: '{dotted}' {message}"
        if message.startswith(("is ", "'", "must"))
        else f"{where}: '{dotted}': {message}"
    )


def _dotted(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(text: str, loc: list[Any]) -> int | None:
    """Best effort: the line of ``loc`` in the TOML text (tomllib keeps no positions)."""
    if not loc:
        return None
    str_parts = [p for p in loc if isinstance(p, str)]
    index = next((p for p in loc if isinstance(p, int)), None)
    table, key = (str_parts[0], str_parts[-1]) if len(str_parts) > 1 else (None, str_parts[0])
    current: str | None = None
    array_count = -1
    fallback = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        header = re.fullmatch(r"\[\[\s*([\w.-]+)\s*\]\]", line) or re.fullmatch(r"\[\s*([\w.-]+)\s*\]", line)
        if header:
            current = header.group(1)
            if line.startswith("[["):
                array_count = array_count + 1 if current == table else array_count
            if table is None and current == key:
                return number
            if current == table and key == table:
                fallback = fallback or number
            continue
        if re.match(rf"{re.escape(key)}\s*=", line) or re.match(rf'"{re.escape(key)}"\s*=', line):
            in_table = current == table or (table is None and current is None)
            if in_table and (index is None or array_count == index):
                return number
    return fallback
