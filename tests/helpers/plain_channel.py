"""An exec channel with nothing but exec (no SFTP), as a GKE pod's Kubernetes exec is: wraps a real
one (SSH to a loopback sshd), optionally running another command than the one asked for (a
hostile machine's answers)."""

from __future__ import annotations

from collections.abc import Callable

from gcptui.remote.compute.exec_channel import ExecChannel, ExecProcess, ExecResult


class PlainChannel:
    """``ExecChannel`` around ``inner`` that is not an ``SshExecChannel``: pulls take the exec path."""

    def __init__(self, inner: ExecChannel, instead: Callable[[str], str] | None = None) -> None:
        self.inner = inner
        self.instead = instead  # the command actually run, made from the one asked for
        self.commands: list[str] = []

    @property
    def where(self) -> str:
        return self.inner.where

    async def start(self, command: str) -> ExecProcess:
        self.commands.append(command)
        return await self.inner.start(self.instead(command) if self.instead else command)

    async def run(self, command: str, *, input: bytes = b"", timeout: float | None = None) -> ExecResult:
        self.commands.append(command)
        return await self.inner.run(
            self.instead(command) if self.instead else command, input=input, timeout=timeout
        )
