"""An ``ExecChannel`` that runs its commands as real local processes (``sh -c``), through asyncio's
subprocess streams: a ``StreamReader`` with asyncio's 64 KiB line limit, as a pod's exec has its
own (1 MiB). For tests of what the watchers do with the bytes a machine sends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from gcptui.remote.compute.exec_channel import ExecResult


class LocalProcess:
    """One ``sh -c`` in its own session (an ``ExecProcess``): closing it ends its whole group."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        assert process.stdin and process.stdout and process.stderr
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.stderr = process.stderr

    @property
    def exit_status(self) -> int | None:
        code = self._process.returncode
        return code if code is not None and code >= 0 else None  # a signal: None, as over SSH

    def close(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)

    async def wait_closed(self) -> None:
        await self._process.wait()


class LocalChannel:
    """Runs every command on this machine (an ``ExecChannel``); ``aclose`` ends and reaps what it
    started (a process only closed would outlive the test's event loop)."""

    where = "local"

    def __init__(self) -> None:
        self.processes: list[LocalProcess] = []

    async def aclose(self) -> None:
        for process in self.processes:
            process.close()
            await process.wait_closed()

    async def start(self, command: str) -> LocalProcess:
        process = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.processes.append(LocalProcess(process))
        return self.processes[-1]

    async def run(self, command: str, *, input: bytes = b"", timeout: float | None = None) -> ExecResult:
        process = await self.start(command)
        try:
            async with asyncio.timeout(timeout):
                process.stdin.write(input)
                process.stdin.write_eof()
                out, err = await asyncio.gather(process.stdout.read(), process.stderr.read())
                await process.wait_closed()
        finally:
            process.close()
        return ExecResult(process.exit_status, out, err)
