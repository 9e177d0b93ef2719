"""Errors a user can act on. Each carries one line that says what went wrong and what to do."""

from __future__ import annotations


class GcptuiError(Exception):
    """A failure the user can fix; the CLI prints ``str(err)`` as one line and exits ``exit_code``."""

    exit_code = 1


class ConfigError(GcptuiError):
    """The configuration file or the command line is wrong (exit code 2)."""

    exit_code = 2


class CloudError(GcptuiError):
    """The Compute API refused or could not be reached."""


class NotFoundError(CloudError):
    """An instance or host named by the user does not exist."""
