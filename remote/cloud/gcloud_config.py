"""Project and default zone, resolved the way ``gcloud`` and the Google client libraries do it.

Pure functions over an environment mapping and the gcloud configuration directory, so they are
testable on temporary directories and never run ``gcloud`` (which may not be installed).
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path


def gcloud_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """gcloud's configuration directory: ``$CLOUDSDK_CONFIG`` or ``~/.config/gcloud``.

    On Windows gcloud uses ``%APPDATA%\\gcloud``; we follow it there too.
    """
    env = os.environ if env is None else env
    if env.get("CLOUDSDK_CONFIG"):
        return Path(env["CLOUDSDK_CONFIG"]).expanduser()
    if os.name == "nt" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "gcloud"
    return Path("~/.config/gcloud").expanduser()


def active_configuration_name(env: Mapping[str, str] | None = None) -> str:
    """The active named configuration: ``CLOUDSDK_ACTIVE_CONFIG_NAME``, file ``active_config``, else ``default``."""
    env = os.environ if env is None else env
    if env.get("CLOUDSDK_ACTIVE_CONFIG_NAME"):
        return env["CLOUDSDK_ACTIVE_CONFIG_NAME"].strip()
    try:
        name = (gcloud_config_dir(env) / "active_config").read_text(encoding="utf-8").strip()
    except OSError:
        return "default"
    return name or "default"


def read_active_configuration(env: Mapping[str, str] | None = None) -> configparser.ConfigParser:
    """The properties of the active configuration (empty when the file is missing or unreadable)."""
    env = os.environ if env is None else env
    parser = configparser.ConfigParser(interpolation=None)
    path = gcloud_config_dir(env) / "configurations" / f"config_{active_configuration_name(env)}"
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, configparser.Error):
        # A broken gcloud file must not stop gcptui: the caller reports "no project" with the fix.
        return configparser.ConfigParser(interpolation=None)
    return parser


def _property(env: Mapping[str, str], section: str, key: str) -> str | None:
    value = read_active_configuration(env).get(section, key, fallback="").strip()
    return value or None


def resolve_project(env: Mapping[str, str] | None = None) -> str | None:
    """The project id as gcloud resolves it (``CLOUDSDK_CORE_PROJECT``, then its ``[core] project``),
    else ``GOOGLE_CLOUD_PROJECT`` (which gcloud ignores: gcptui and the gcloud it runs for IAP tunnels
    must act on the same project)."""
    return project_sources(env)[0]


def project_sources(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the project gcptui uses, a warning line when gcloud and ``GOOGLE_CLOUD_PROJECT`` disagree)."""
    env = os.environ if env is None else env
    gcloud = env.get("CLOUDSDK_CORE_PROJECT", "").strip() or _property(env, "core", "project")
    client = env.get("GOOGLE_CLOUD_PROJECT", "").strip() or None
    if gcloud and client and gcloud != client:
        return gcloud, (
            f"gcloud's project is {gcloud} but GOOGLE_CLOUD_PROJECT is {client}: using {gcloud}, as gcloud "
            "does; set [gcp] project in gcptui.toml to choose"
        )
    return gcloud or client, None


def resolve_default_zone(env: Mapping[str, str] | None = None) -> str | None:
    """The default zone: ``CLOUDSDK_COMPUTE_ZONE``, then gcloud's ``[compute] zone``."""
    env = os.environ if env is None else env
    if env.get("CLOUDSDK_COMPUTE_ZONE", "").strip():
        return env["CLOUDSDK_COMPUTE_ZONE"].strip()
    return _property(env, "compute", "zone")


def resolve_account(env: Mapping[str, str] | None = None) -> str | None:
    """The Google account gcloud acts as (``CLOUDSDK_CORE_ACCOUNT``, then its ``[core] account``)."""
    env = os.environ if env is None else env
    return (env.get("CLOUDSDK_CORE_ACCOUNT") or "").strip() or _property(env, "core", "account")
