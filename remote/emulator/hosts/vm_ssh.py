"""An emulated VM's SSH server: asyncssh, public-key auth, a real ``/bin/sh`` per exec, SFTP on the disk.

Commands run with ``cwd=HOME`` in a new session (so the channel closing hangs up their group, as a
terminal would) and may detach with ``setsid``/``nohup`` to outlive the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import functools
import logging
import os
import pty
import signal
import struct
import subprocess
import termios
import weakref
from collections.abc import Callable
from pathlib import Path

import asyncssh

from gcptui.remote.aio import within

# After a terminal session's shell exits, how long a background child holding the terminal may keep it open.
DRAIN_SECONDS = 1.0


@functools.cache
def hangup_default() -> tuple[str, ...]:
    """A prefix that gives a session's processes SIGHUP's default action back.

    A VM's session processes must die when their client hangs up, as under sshd. When the emulator
    itself was started with SIGHUP ignored (``nohup``, some CI runners), that disposition survives
    ``exec`` into every child, and a hung-up job would run on. GNU ``env --default-signal`` resets it;
    where there is no such ``env`` (macOS) nothing is added.
    """
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        return ()
    prefix = ("env", "--default-signal=HUP")
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return prefix if ok else ()


# asyncio's warning for the fifth and later writes to a transport whose peer is gone.
GOODBYE_WARNING = "socket.send() raised exception."


class _QuietGoodbyes(logging.Filter):
    """Drops asyncio's ``socket.send() raised exception.`` raised on an emulated VM's loop.

    Why: a client that quits (``q`` in the demo) disconnects with asyncssh, which sends a close for
    every open channel and then closes its socket at once. The emulated VM's SSH server, in the same
    process as the TUI, answers each of those closes after the socket is gone; from the fifth such
    write asyncio logs this warning, which then lands on the user's terminal after the TUI exits (the
    more channels open, as during a training job with logs, GPU and progress streams, the likelier).
    Nothing is lost: the client asked to go. A real VM's sshd is another machine, and warnings on
    any other loop (the TUI's own connections) still show.
    """

    def __init__(self) -> None:
        super().__init__()
        self.loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != GOODBYE_WARNING:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return True
        return loop not in self.loops


_QUIET = _QuietGoodbyes()


def quiet_goodbyes(loop: asyncio.AbstractEventLoop) -> None:
    """Silence asyncio's goodbye-write warning on ``loop`` (an emulated VM's), see ``_QuietGoodbyes``."""
    logger = logging.getLogger("asyncio")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
    _QUIET.loops.add(loop)


class ConfinedSftpServer(asyncssh.SFTPServer):
    """SFTP on the VM's disk only: starts in HOME, absolute paths as the shell sees them."""

    def __init__(self, chan: asyncssh.SSHServerChannel, root: Path, home: Path) -> None:
        super().__init__(chan)
        self._root = os.path.realpath(root)
        self._home = str(home)

    def map_path(self, path: bytes) -> bytes:
        full = os.path.normpath(os.path.join(self._home, os.fsdecode(path)))
        real = os.path.realpath(full)
        if real != self._root and not real.startswith(self._root + os.sep):
            raise asyncssh.SFTPPermissionDenied(f"{os.fsdecode(path)} is outside the VM's disk")
        return os.fsencode(full)


class _TrackedServer(asyncssh.SSHServer):
    """Remembers live connections so a VM going down can drop them all; public keys only, each
    checked by ``allows(username, key)`` (metadata keys, or OS Login's profiles)."""

    def __init__(
        self, connections: set[asyncssh.SSHServerConnection], allows: Callable[[str, asyncssh.SSHKey], bool]
    ) -> None:
        self._connections = connections
        self._allows = allows
        self._conn: asyncssh.SSHServerConnection | None = None

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self._allows(username, key)

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._connections.discard(self._conn)


class VmSshServer:
    """One boot's SSH listener on the VM's address."""

    def __init__(
        self,
        host_key: asyncssh.SSHKey,
        allows: Callable[[str, asyncssh.SSHKey], bool],
        disk_root: Path,
        home: Path,
        environment: Callable[[str], dict[str, str]],
    ) -> None:
        self._host_key = host_key
        self._allows = allows
        self._root = disk_root
        self._home = home
        self._environment = environment  # username -> the session's environment
        self._listener: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._sessions: set[asyncio.Task[None]] = set()

    async def start(self, address: str, port: int) -> int:
        """Listen on ``address:port`` (0: any free port); returns the port."""
        quiet_goodbyes(asyncio.get_running_loop())
        self._listener = await asyncssh.listen(
            address,
            port,
            server_factory=lambda: _TrackedServer(self._connections, self._allows),
            server_host_keys=[self._host_key],
            process_factory=self._session,
            sftp_factory=lambda chan: ConfinedSftpServer(chan, self._root, self._home),
            allow_scp=False,
            encoding=None,
            line_editor=False,
            reuse_address=True,
        )
        return int(self._listener.get_port())

    def reset(self) -> int:
        """Drop every live connection as a reset from the network would (the VM runs on and listens
        still); how many there were."""
        dropped = list(self._connections)
        for conn in dropped:
            conn.abort()
        return len(dropped)

    async def close(self) -> None:
        """Stop listening and drop every connection (the VM lost power)."""
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()
            self._listener = None
        for conn in list(self._connections):
            conn.abort()
        self._connections.clear()

    async def _session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        username = process.get_extra_info("username") or "user"
        argv = [*hangup_default(), *(["/bin/sh", "-c", process.command] if process.command else ["/bin/sh"])]
        if process.get_terminal_type():
            await _terminal_session(process, argv, self._home, self._environment(username))
            return
        try:
            child, pipes = await _spawn(argv, self._home, self._environment(username))
        except OSError as err:
            process.stderr.write(f"cannot run the shell: {err}\n".encode())
            process.exit(127)
            return
        feeder = asyncio.create_task(_feed(process.stdin, pipes.stdin))
        pumps = [asyncio.create_task(_pump(pipes.stdout, process.stdout)),
                 asyncio.create_task(_pump(pipes.stderr, process.stderr))]  # fmt: skip
        exited = asyncio.create_task(child.wait())
        finished = asyncio.create_task(_output_ended(exited, pumps))
        closed = asyncio.create_task(process.channel.wait_closed())
        try:
            # As under sshd, the session ends when the shell has exited and its output has reached
            # EOF: a background child still holding stdout (`cmd &`) keeps the channel open.
            await asyncio.wait({finished, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not finished.done():
                # The client went away: hang up the session's group, as sshd does for a terminal.
                _hang_up(child)
                pipes.close()
                await exited
                return
            _report_exit(process, exited.result())
        finally:
            for task in (feeder, *pumps, exited, finished, closed):
                task.cancel()
            if child.returncode is None:  # cancelled (the VM's loop is going away) while it ran
                _hang_up(child)
            pipes.close()


@dataclasses.dataclass
class _Pipes:
    """The session's ends of its shell's stdin, stdout and stderr.

    Why not asyncio's ``PIPE``: its ``Process.wait()`` also waits for every pipe to close, which a
    background grandchild may never do, and it keeps no public handle to close them. Made here, the
    shell's exit is seen when it happens, and the session closes its ends when it is over, so nothing
    outlives it (in the demo the emulator shares the TUI's process and loop).
    """

    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    transports: list[asyncio.BaseTransport]

    def close(self) -> None:
        for transport in self.transports:
            transport.close()


async def _spawn(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, _Pipes]:
    """Start ``argv`` in a new session on pipes of our own (see ``_Pipes``)."""
    loop = asyncio.get_running_loop()
    fds = [*os.pipe(), *os.pipe(), *os.pipe()]  # stdin r/w, stdout r/w, stderr r/w
    try:
        child = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=fds[0], stdout=fds[3], stderr=fds[5], start_new_session=True
        )
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    for fd in (fds[0], fds[3], fds[5]):  # the child's ends
        os.close(fd)
    transports: list[asyncio.BaseTransport] = []
    readers = []
    for fd in (fds[2], fds[4]):
        reader = asyncio.StreamReader(limit=2**16)
        transport, _ = await loop.connect_read_pipe(
            functools.partial(asyncio.StreamReaderProtocol, reader), open(fd, "rb", 0)
        )
        transports.append(transport)
        readers.append(reader)
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    stdin_transport, _ = await loop.connect_write_pipe(lambda: protocol, open(fds[1], "wb", 0))
    transports.append(stdin_transport)
    stdin = asyncio.StreamWriter(stdin_transport, protocol, None, loop)
    return child, _Pipes(stdin, readers[0], readers[1], transports)


async def _output_ended(exited: asyncio.Task[int], pumps: list[asyncio.Task[None]]) -> int:
    """The shell's exit status, once it has exited and its stdout and stderr have reached EOF."""
    await asyncio.wait(pumps)
    return await exited


def _report_exit(process: asyncssh.SSHServerProcess[bytes], code: int) -> None:
    """Send the shell's exit status (or the signal that ended it) and close the channel."""
    with contextlib.suppress(Exception):  # the client may be gone already
        if code < 0:
            process.exit_with_signal(signal.Signals(-code).name.removeprefix("SIG"))
        else:
            process.exit(code)


def _hang_up(child: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGHUP)


def _controlling_terminal() -> None:
    """In the child: a session of its own with the pty as its controlling terminal, as sshd gives a
    login. Without it an interactive shell has no job control and says so ("can't access tty; job
    control turned off"), which no GCE VM prints."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def _terminal_session(
    process: asyncssh.SSHServerProcess[bytes], argv: list[str], home: Path, env: dict[str, str]
) -> None:
    """A session that asked for a terminal (``ssh -t``, an interactive login) gets a pseudo-terminal,
    as sshd gives it: the line discipline echoes, turns Enter into a newline, and the shell prompts."""
    master, slave = pty.openpty()
    width, height, _, _ = process.get_terminal_size()
    if width and height:
        with contextlib.suppress(OSError):
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
    env = {**env, "TERM": process.get_terminal_type() or "xterm"}
    try:
        child = await asyncio.create_subprocess_exec(
            *argv,
            cwd=home,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=_controlling_terminal,
        )
    except OSError as err:
        os.close(master)
        os.close(slave)
        process.stderr.write(f"cannot run the shell: {err}\n".encode())
        process.exit(127)
        return
    os.close(slave)  # the child holds it: its exit ends the reads below with EIO
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:
            data = b""
        if data:
            process.stdout.write(data)
        else:
            loop.remove_reader(master)
            ended.set()

    loop.add_reader(master, readable)

    async def feed() -> None:
        with contextlib.suppress(asyncssh.Error, ConnectionError, OSError):
            while data := await process.stdin.read(65536):
                os.write(master, data)

    feeder = asyncio.create_task(feed())
    closed = asyncio.create_task(process.channel.wait_closed())
    exited = asyncio.create_task(child.wait())
    try:
        await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            _hang_up(child)
            await exited
        with contextlib.suppress(TimeoutError):
            await within(DRAIN_SECONDS, ended.wait())
        loop.remove_reader(master)  # nothing more goes to the channel once it reports the exit
        _report_exit(process, exited.result())
    finally:
        for task in (feeder, closed, exited):
            task.cancel()
        if child.returncode is None:  # cancelled (the VM's loop is going away) while it ran
            _hang_up(child)
        loop.remove_reader(master)
        os.close(master)


async def _feed(source: asyncssh.SSHReader[bytes], sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (asyncssh.Error, ConnectionError, BrokenPipeError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sink.close()


async def _pump(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    with contextlib.suppress(asyncssh.Error, ConnectionError, BrokenPipeError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
