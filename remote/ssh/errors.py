"""SSH failures a user can act on, each one line that names the host and the fix.

``retryable`` tells the pool (and services looping on a ``ConnectionGetter``) whether waiting and
trying again can help: a refused port can come back, a wrong key or an untrusted host key cannot
until the user acts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcptui.remote.errors import GcptuiError

if TYPE_CHECKING:
    import asyncssh


class SshError(GcptuiError):
    """Any failure to reach a host or to run a command on it over SSH."""

    retryable = True

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host


class SshUnreachableError(SshError):
    """Nothing answered, the port refused, the proxy failed or the link dropped: may come back."""


class SshAuthError(SshError):
    """The server refused every key we offered for this user."""

    retryable = False


class SshConfigError(SshError):
    """The host cannot be addressed as configured (no IP address, bad proxy command)."""

    retryable = False


class HostKeyError(SshError):
    """The server's host key is not trusted; the connection was refused before logging in."""

    retryable = False

    def __init__(self, host: str, message: str, key: asyncssh.SSHKey | None, lookup_name: str) -> None:
        super().__init__(host, message)
        self.key = key
        self.lookup_name = lookup_name


class HostKeyUnknownError(HostKeyError):
    """No key is known for the host: the user may accept the offered one (``accept_host_key``)."""


class HostKeyChangedError(HostKeyError):
    """A different key is known for the host: refused always; the user removes the old line first."""

    def __init__(
        self, host: str, message: str, key: asyncssh.SSHKey | None, lookup_name: str, lines: list[int]
    ) -> None:
        super().__init__(host, message, key, lookup_name)
        self.lines = lines
