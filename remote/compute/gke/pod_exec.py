"""The exec channel into a pod: Kubernetes exec over WebSocket (``v5.channel.k8s.io``) on aiohttp.

kubernetes_asyncio's stream client speaks only ``v4``, which cannot close a command's stdin (``cat``
would never end), so the frames are written here: one byte of stream number, then the data; ``[255,
0]`` closes stdin; stream 3 carries the final ``Status`` whose ``ExitCode`` cause is the exit status.
The server, CA and token are the cluster's (``KubeCluster.configuration``)."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_channel import ExecResult
from gcptui.remote.errors import CloudError
from gcptui.remote.safe_text import one_line

if TYPE_CHECKING:
    import aiohttp

    from gcptui.remote.compute.gke.kube import KubeCluster

PROTOCOL = "v5.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
MAX_STATUS = 65536
LIMIT = 1 << 20  # bytes a stream buffers before its reader catches up (twice this, asyncio pauses)
MAX_MESSAGE = 8 << 20  # one WebSocket message (the API server sends small frames)


class _Flow:
    """What an ``asyncio.StreamReader`` pauses once its unread buffer passes twice its limit, and
    resumes once its reader drained it: the "transport" of a stream fed from WebSocket frames."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()

    def pause_reading(self) -> None:
        self.open.clear()

    def resume_reading(self) -> None:
        self.open.set()


class _Stdin:
    def __init__(self, process: PodProcess) -> None:
        self._process = process

    def write(self, data: bytes) -> None:
        if data:
            self._process.outbox.put_nowait(bytes([STDIN]) + data)

    async def drain(self) -> None:
        await self._process.outbox.join()

    def write_eof(self) -> None:
        self._process.outbox.put_nowait(bytes([CLOSE, STDIN]))


class PodProcess:
    """One command in a pod (an ``ExecProcess``)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, session: aiohttp.ClientSession) -> None:
        self.ws = ws
        self.session = session
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._stdout = asyncio.StreamReader(limit=LIMIT)
        self._stderr = asyncio.StreamReader(limit=LIMIT)
        self._stdout_flow, self._stderr_flow = _Flow(), _Flow()
        self._stdout.set_transport(self._stdout_flow)  # type: ignore[arg-type]
        self._stderr.set_transport(self._stderr_flow)  # type: ignore[arg-type]
        self.stderr_dropped = 0  # bytes of stderr nobody read, dropped past the buffer
        self._stdin = _Stdin(self)
        self._exit: int | None = None
        self.ended = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._receive()), asyncio.ensure_future(self._send())]

    @property
    def stdin(self) -> _Stdin:
        return self._stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self._stdout

    @property
    def stderr(self) -> asyncio.StreamReader:
        return self._stderr

    @property
    def exit_status(self) -> int | None:
        return self._exit

    async def _send(self) -> None:
        while True:
            frame = await self.outbox.get()
            try:
                await self.ws.send_bytes(frame)
            except ConnectionError:
                pass  # the command ended: what it did not read is dropped, as over SSH
            finally:
                self.outbox.task_done()

    async def _receive(self) -> None:
        from aiohttp import WSMsgType

        try:
            async for message in self.ws:
                if message.type != WSMsgType.BINARY or not message.data:
                    continue
                channel, data = message.data[0], message.data[1:]
                if channel == STDOUT:
                    self._stdout.feed_data(data)
                    # Stdout not read yet: stop reading the socket (the pod waits) until it is.
                    await self._stdout_flow.open.wait()
                elif channel == STDERR:
                    # Stderr a reader does not keep up with is dropped, never buffered without bound
                    # and never a reason to stall stdout.
                    if self._stderr_flow.open.is_set():
                        self._stderr.feed_data(data)
                    else:
                        self.stderr_dropped += len(data)
                elif channel == ERROR:
                    self._exit = _exit_status(data[:MAX_STATUS])
        finally:
            self._stdout.feed_eof()
            self._stderr.feed_eof()
            self.ended.set()

    def resize(self, width: int, height: int) -> None:
        """A terminal's new size (a ``tty`` process): stream 4, ``{"Width": W, "Height": H}``."""
        self.outbox.put_nowait(bytes([RESIZE]) + json.dumps({"Width": width, "Height": height}).encode())

    async def wait_closed(self) -> None:
        await self.ended.wait()

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        asyncio.ensure_future(self._close())

    async def _close(self) -> None:
        await self.ws.close()
        await self.session.close()


def _exit_status(data: bytes) -> int | None:
    """0 for ``Success``; the ``ExitCode`` cause of a failure; None when the Status says neither."""
    try:
        found = json.loads(data)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    if found.get("status") == "Success":
        return 0
    details = found.get("details") if isinstance(found.get("details"), dict) else {}
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes[:8] if isinstance(causes, list) else []:
        message = cause.get("message") if isinstance(cause, dict) else None
        if (
            cause.get("reason") == "ExitCode"
            and isinstance(message, str)
            and message.isdigit()
            and len(message) < 4
        ):
            return int(message)
    return None


class PodExecChannel:
    """Runs processes in one pod's container (an ``ExecChannel``)."""

    def __init__(self, cluster: KubeCluster, namespace: str, pod: str, container: str | None = None) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.pod = pod
        self.container = container

    @property
    def where(self) -> str:
        return f"pod {self.namespace}/{self.pod}"

    async def start(self, command: str, *, tty: bool = False) -> PodProcess:
        """``sh -c command`` in the pod; with ``tty``, on a terminal (its output all on stdout, as
        ``kubectl exec -t`` has it; ``PodProcess.resize`` sizes it)."""
        import aiohttp

        configuration = await self.cluster.configuration()
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        if configuration.cert_file and configuration.key_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        headers: dict[str, Any] = {}
        token = await configuration.get_api_key_with_prefix("BearerToken")
        if token:
            headers["Authorization"] = token
        query = "&".join(["command=sh", "command=-c", f"command={quote(command)}", "stdin=true", "stdout=true",
                          "stderr=false" if tty else "stderr=true", *(["tty=true"] if tty else []),
                          *([f"container={quote(self.container)}"] if self.container else [])])  # fmt: skip
        url = f"{configuration.host}/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(self.pod)}/exec?{query}"
        session = aiohttp.ClientSession()
        try:
            ws = await session.ws_connect(
                url, protocols=(PROTOCOL,), ssl=context, headers=headers, max_msg_size=MAX_MESSAGE
            )
        except aiohttp.WSServerHandshakeError as err:
            await session.close()
            raise CloudError(
                f"cannot exec in {self.where}: {err.status} {one_line(err.message)[:200]}: is the pod Running?"
            ) from None
        except (aiohttp.ClientError, OSError) as err:
            await session.close()
            raise CloudError(
                f"cannot reach the API server of {self.where}: {one_line(str(err))[:200]}"
            ) from None
        return PodProcess(ws, session)

    async def run(self, command: str, *, input: bytes = b"", timeout: float | None = None) -> ExecResult:
        process = await self.start(command)
        try:

            async def whole() -> ExecResult:
                process.stdin.write(input)
                process.stdin.write_eof()
                await process.stdin.drain()
                out, err = await asyncio.gather(process.stdout.read(), process.stderr.read())
                await process.ended.wait()
                return ExecResult(process.exit_status, out, err)

            return await within(timeout, whole())
        finally:
            process.close()
