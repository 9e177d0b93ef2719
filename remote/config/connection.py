"""Where the fleet is and how to reach it: ``[gcp]``, ``[ssh]`` and ``[[hosts]]``."""

from __future__ import annotations

import re

from pydantic import Field, StrictFloat, field_validator

from gcptui.remote.config.base import Port, _Section


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

    control_endpoint: str = Field(
        default="",
        description=(
            "An emulator's control path (`gcptui emulator` writes it), starting with `http://` or "
            "`https://`: `gcptui vm preempt` (and `P` in the demo) asks it to preempt what Google's APIs "
            "offer no call for, a Spot TPU node or a Vertex AI job's Spot worker, with the API's "
            "credentials. Empty: `vm preempt` reaches what Google can act out, Spot VMs and GKE nodes "
            "(`simulateMaintenanceEvent`)."
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

    @field_validator("api_endpoint", "control_endpoint")
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
    connect_timeout: StrictFloat = Field(
        default=10.0,
        gt=0,
        description="Seconds to wait for one SSH connection attempt (TCP connect and handshake).",
    )
    keepalive_seconds: StrictFloat = Field(
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
