"""``pods/NAME/exec`` over WebSocket (``v5.channel.k8s.io``, kubectl's default since 1.30; ``v4``
too): the command runs as a process of the pod, in its directory with its environment.

Frames are binary, the first byte the stream: 0 stdin, 1 stdout, 2 stderr, 3 the final ``Status``,
4 terminal resize; under v5, ``[255, 0]`` from the client closes stdin."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import struct
import termios
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from gcptui.remote.emulator.gke.resources import status

if TYPE_CHECKING:
    from gcptui.remote.emulator.gke.cluster import Cluster

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def _bad(code: int, reason: str, message: str) -> web.Response:
    return web.Response(
        status=code, text=json.dumps(status(code, reason, message)), content_type="application/json"
    )


async def serve_exec(
    request: web.Request, cluster: Cluster, namespace: str, pod: dict[str, Any]
) -> web.StreamResponse:
    name = pod["metadata"]["name"]
    command = request.query.getall("command", [])
    if not command:
        return _bad(400, "BadRequest", "you must specify at least 1 command")
    containers = [c["name"] for c in pod["spec"]["containers"]]
    container = request.query.get("container") or containers[0]
    if container not in containers:
        return _bad(400, "BadRequest", f"container {container} is not valid for pod {name}")
    runner = cluster.runners.get((namespace, name))
    if runner is None or runner.process is None or pod["status"].get("phase") != "Running":
        return _bad(400, "BadRequest", f'unable to upgrade connection: container not found ("{container}")')
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    if not ws.can_prepare(request).ok:
        return _bad(400, "BadRequest", "exec needs a WebSocket upgrade (v5.channel.k8s.io)")
    await ws.prepare(request)
    v5 = ws.ws_protocol == "v5.channel.k8s.io"
    want_stdin = request.query.get("stdin") in ("1", "true")
    env = runner._env(pod, pod["spec"]["containers"][containers.index(container)])
    if request.query.get("tty") in ("1", "true"):
        return await _serve_tty(ws, command, runner.directory, {**env, "TERM": "xterm"}, want_stdin)
    try:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=runner.directory, env=env, start_new_session=True,
            stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
    except OSError as error:
        return await _not_started(ws, command, error)
    lock = asyncio.Lock()

    async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            async with lock:
                await ws.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        async for message in ws:
            frame = _frame(message)
            if not frame:
                continue
            channel, data = frame[0], frame[1:]
            if channel == STDIN and process.stdin is not None and data:
                process.stdin.write(data)
                with contextlib.suppress(ConnectionError):
                    await process.stdin.drain()
            elif channel == CLOSE and v5 and data[:1] == bytes([STDIN]) and process.stdin is not None:
                process.stdin.close()
        # The client went away: the session ends, as kubelet ends it (hangup to the command's group).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGHUP)

    feeding = asyncio.ensure_future(feed())
    try:
        await asyncio.gather(pump(process.stdout, STDOUT), pump(process.stderr, STDERR))
        code = await process.wait()
        async with lock:
            await _finish(ws, command, code)
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeding
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    return ws


async def _finish(ws: web.WebSocketResponse, command: list[str], code: int) -> None:
    """The final ``Status`` on the error stream (the exit code as an ``ExitCode`` cause), then close."""
    if code == 0:
        final: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        final = status(500, "NonZeroExitCode", f"command terminated with non-zero exit code: error executing "
                       f"command {command}, exit code {code}",
                       {"causes": [{"reason": "ExitCode", "message": str(code)}]})  # fmt: skip
        final.pop("code")
    with contextlib.suppress(ConnectionError):
        await ws.send_bytes(bytes([ERROR]) + json.dumps(final).encode())
    await ws.close()


def _frame(message: Any) -> bytes:
    """A client frame's bytes (stream number first): binary, or text as the Python client sends its
    stdin and resize messages; b"" for anything else."""
    if message.type == WSMsgType.BINARY:
        return bytes(message.data)
    if message.type == WSMsgType.TEXT:
        return str(message.data).encode()
    return b""


async def _not_started(
    ws: web.WebSocketResponse, command: list[str], error: OSError
) -> web.WebSocketResponse:
    """The command could not start (no such binary): the runtime's error ``Status`` on stream 3, as
    the kubelet sends it, then close."""
    reason = "executable file not found in $PATH" if isinstance(error, FileNotFoundError) else error.strerror
    message = (f"OCI runtime exec failed: exec failed: unable to start container process: exec: "
               f"{json.dumps(command[0])}: {reason}: unknown")  # fmt: skip
    final = status(500, "InternalError", message, {"causes": [{"message": message}]})
    with contextlib.suppress(ConnectionError):
        await ws.send_bytes(bytes([ERROR]) + json.dumps(final).encode())
    await ws.close()
    return ws


def _set_size(fd: int, message: bytes) -> None:
    """A resize frame's ``{"Width": W, "Height": H}`` onto the terminal (the kernel tells the
    foreground process group with SIGWINCH, as the container runtime's pty does)."""
    try:
        size = json.loads(message[:1024])
        width, height = int(size["Width"]), int(size["Height"])
    except (ValueError, KeyError, TypeError):
        return  # a bad frame is ignored, as the kubelet ignores it
    if 0 < width < 65536 and 0 < height < 65536:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


def _controlling_terminal() -> None:
    """In the child: a session of its own with the pty as its controlling terminal (job control, ^C)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def _serve_tty(ws: web.WebSocketResponse, command: list[str], cwd: Path, env: dict[str, str],
                     want_stdin: bool) -> web.WebSocketResponse:  # fmt: skip
    """``tty=true``: the command on a pseudo-terminal; its output (stdout and stderr, one stream as a
    terminal has) on stream 1, stream 4's frames resize it."""
    master, slave = os.openpty()
    try:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
            preexec_fn=_controlling_terminal)  # fmt: skip
    except OSError as error:
        os.close(master)
        return await _not_started(ws, command, error)
    finally:
        os.close(slave)
    loop = asyncio.get_running_loop()
    output: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            chunk = b""
        if not chunk:
            loop.remove_reader(master)
        output.put_nowait(chunk)

    loop.add_reader(master, readable)

    async def pump() -> None:
        while chunk := await output.get():
            try:
                await ws.send_bytes(bytes([STDOUT]) + chunk)
            except ConnectionError:
                return  # the client went away: feed() hangs the session up

    async def feed() -> None:
        async for message in ws:
            frame = _frame(message)
            if not frame:
                continue
            channel, data = frame[0], frame[1:]
            if channel == STDIN and want_stdin and data:
                await asyncio.to_thread(os.write, master, data)  # blocks only while the terminal is full
            elif channel == RESIZE:
                _set_size(master, data)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGHUP)

    feeding = asyncio.ensure_future(feed())
    try:
        await pump()
        await _finish(ws, command, await process.wait())
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeding
        loop.remove_reader(master)
        os.close(master)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    return ws
