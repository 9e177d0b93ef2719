"""Google credentials and endpoints, shared by the Compute client library and the light REST reader.

Nothing heavy is imported at module level: ``gcptui ls`` must not pay for ``google.cloud.compute_v1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gcptui.remote.cloud.errors import credentials_error
from gcptui.remote.errors import ConfigError

DEFAULT_ENDPOINT = "https://compute.googleapis.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def read_token(path: Path) -> str:
    """The bearer token in ``path`` (``[gcp] access_token_file``); ``ConfigError`` when unreadable or empty."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise ConfigError(
            f"cannot read [gcp] access_token_file {path}: {err.strerror}: fix the path in gcptui.toml"
        ) from None
    if not token:
        raise ConfigError(f"[gcp] access_token_file {path} is empty: write the token into it")
    return token


def is_local_endpoint(endpoint: str) -> bool:
    """A plain-http loopback endpoint (the emulator): it needs no Google credentials."""
    parsed = urlparse(endpoint)
    host = parsed.hostname or ""
    return parsed.scheme == "http" and (host == "localhost" or host.startswith("127.") or host == "::1")


def endpoint_url(api_endpoint: str) -> str:
    """The base URL the client library would use for ``[gcp] api_endpoint`` (``https://`` when it
    names no scheme; the default endpoint when empty)."""
    endpoint = api_endpoint.rstrip("/") or DEFAULT_ENDPOINT
    return endpoint if "://" in endpoint else f"https://{endpoint}"


def build_credentials(api_endpoint: str, access_token: str | None = None) -> Any:
    """The credentials gcptui acts with: a given bearer token (sent as is, never refreshed), none for
    the emulator's loopback endpoint, else Application Default Credentials; one-line ``CloudError``
    when there are none."""
    if access_token:
        from google.oauth2.credentials import Credentials

        return Credentials(token=access_token)
    if api_endpoint and is_local_endpoint(api_endpoint):
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    import google.auth

    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
    except Exception as err:
        raise (credentials_error(err) or err) from None
    return credentials
