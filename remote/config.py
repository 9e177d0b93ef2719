"""The ``gcptui.toml`` file of DESIGN.md, validated with pydantic.

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
    project: str | None = None
    zones: list[str] = []
    api_endpoint: str = ""
    # A file holding a bearer token sent on every Compute call instead of Google credentials (the
    # emulator's; gcloud's ``auth/access_token_file`` works the same way). Relative to the config file.
    access_token_file: str = ""

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
    user: str = ""
    key: str = "~/.ssh/google_compute_engine"
    known_hosts: str = "~/.ssh/google_compute_known_hosts"
    proxy_command: str = ""
    port: Port = 22  # GCE instances listen on 22; the emulator sets its own port here
    connect_timeout: float = Field(default=10.0, gt=0)
    keepalive_seconds: float = Field(default=15.0, ge=0)


class HostConfig(_Section):
    name: str = Field(min_length=1)
    address: str = Field(min_length=1)
    port: Port = 22
    user: str = ""
    key: str = ""
    known_hosts: str = ""


class SyncConfig(_Section):
    source: str = "."
    dest: str = "~/project"
    exclude: list[str] = []
    protect: list[str] = []

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
    setup: str = ""
    command: str = ""
    resume: str = ""
    env: dict[str, str] = {}
    stop_grace_seconds: float = Field(default=30.0, ge=0)

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


class KeepaliveConfig(_Section):
    enabled: bool = False
    poll_seconds: float = Field(default=10.0, gt=0)
    max_restarts: int = Field(default=20, ge=0)


class LogsConfig(_Section):
    history_lines: int = Field(default=200, ge=0)
    buffer_lines: int = Field(default=10_000, ge=100)
    files: list[str] = []  # extra remote files to tail beside the job's output


class GpuConfig(_Section):
    idle_util_percent: float = Field(default=5.0, ge=0, le=100)
    idle_minutes: float = Field(default=5.0, gt=0)


class Config(_Section):
    gcp: GcpConfig | None = None
    ssh: SshConfig = SshConfig()
    hosts: list[HostConfig] = []
    sync: SyncConfig = SyncConfig()
    job: JobConfig = JobConfig()
    keepalive: KeepaliveConfig = KeepaliveConfig()
    logs: LogsConfig = LogsConfig()
    gpu: GpuConfig = GpuConfig()
    keys: dict[str, str] = {}  # action id -> key, overrides the default keymap

    # Where the file was read from (None: built-in defaults); relative paths resolve against its folder.
    path: Path | None = Field(default=None, exclude=True)

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
        return f"{where}: unknown key '{dotted}': remove it or check its spelling (allowed keys in {section} are listed in the README)"
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
