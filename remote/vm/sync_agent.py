"""The far end of a sync session: runs ON the VM, started as ``python3 -I -S -c <this source>``.

Standard library only, no imports from gcptui. It speaks a framed protocol on stdin/stdout:
every frame is a 4-byte big-endian length and a JSON header; a ``put`` header is followed by
exactly ``s`` bytes of file data (or, when it has ``z``, ``z`` bytes of zlib data that inflate to
``s``; or, when it has ``zs``, the next ``zs`` bytes of the session's one deflate stream, ended by
a sync flush, that inflate to ``s``; or, when it has ``k``, chunks each after its 4-byte length,
ended by a zero length, or by 0xFFFFFFFF to discard the file). Operations are pipelined: the client sends many and asks for
their results with one ``flush``. Replies are frames too.

The agent keeps the sync ledger: the record of every path sync put under ``dest``, with the
kind, size and mtime it had right after sync wrote it. It deletes only paths in that record
whose current state still matches it, so files written on the VM by anything else (training
outputs, checkpoints, a file sync wrote that training later changed) are never removed.
Paths never leave dest. The agent holds an open descriptor of dest (reached through links in its
own path, as rsync allows) and resolves every path below it component by component with
``openat(O_NOFOLLOW | O_DIRECTORY)``; it writes, renames, chmods and deletes only through the
``*at`` calls on the parent's descriptor. A link (or file) where a directory should be is refused,
never followed, whatever the VM's processes rename meanwhile. It replaces an entry of another
kind (a file by a directory, a directory by a file) only when its ledger holds that entry as sync
left it, so a file the VM wrote is never deleted to make room.

Fan-out (one laptop uplink, many VMs): ``serve`` makes an agent a relay, listening on the VM's
internal address for other VMs' agents, which then take a ``fetch`` instead of a ``put``: the
laptop names the path, size, mode, mtime and SHA-256, the bytes come from the relay, and the
fetching agent lands them (same checks, same ledger) only if they hash to that digest. The relay
serves only regular files below its dest, to holders of the session's token, that hash to the
digest asked for; it decides nothing about what lands elsewhere.

The ledger lives beside the home, not in ``dest``: ``~/.gcptui/sync/<sha256(dest)[:16]>.json``
plus an append-only ``.journal`` of changes since, replayed on load and folded in by ``compact``.
"""

import collections
import errno
import hashlib
import hmac
import json
import os
import socket
import stat
import struct
import sys
import threading
import time
import zlib
from typing import IO

TMP_PREFIX = ".gcptui-tmp."
# stdin is read in big chunks into our own buffer: sshd refills the pipe (and sends the client a
# window adjust) per read, so 8 KiB reads meant one SSH round of packets per 8 KiB on both ends.
READ_SIZE = 1 << 20
READ_AHEAD = 32 << 20  # stdin read ahead of the file writes: ~5 s of a 50 Mbit/s link
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, named only from Python 3.10 on
# A request frame larger than this is not from gcptui's client (its headers are small JSON).
MAX_FRAME = 16 << 20
# An existing directory whose mode the agent may not change (failures.KEPT_MODE: a warning).
KEPT_MODE = "kept the mode of "
CHUNK_ABORT = 0xFFFFFFFF  # a chunked put's abort mark (the client's CHUNK_ABORT)
ABORTED = "the local file changed while it was read; not written"
DIR_KEY = ["d", 0, 0]  # a directory's ledger record (kind, size, mtime: only the kind matters)
LINK_KEY = ["l", 0, 0]
MAX_CACHED_DIRS = 256  # open directory descriptors kept per batch, well under any fd limit
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# Fan-out: how long a relay waits for a file that has not landed on it yet (the laptop's link
# brings it), how long a fetching agent waits to connect, and the most one relayed line may hold.
RELAY_WAIT_S = 60.0
RELAY_CONNECT_S = 5.0
RELAY_LINE = 64 << 10
RELAY_WINDOW = 64  # fetch requests ahead of the file being written (a few KiB: never blocks)
RELAY_UNREACHABLE = "relay unreachable: "  # a fetch's error when the relay cannot be reached at all


class Input:
    """Frames and file data from stdin, from a buffer filled by large ``os.read`` calls.

    A reader thread keeps reading ahead (up to ``READ_AHEAD`` bytes) while the main thread writes
    files: on a slow disk the link then keeps delivering the next files' data meanwhile, instead
    of stalling behind every create and rename (a first sync's thousands of small files took 3.5 s
    of disk work here, which the link would otherwise wait out after carrying them in 2.4 s).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.pos = 0
        try:  # a 1 MiB pipe lets sshd hand over more per wake-up; not a pipe, or refused: fine
            import fcntl

            fcntl.fcntl(fd, F_SETPIPE_SZ, READ_SIZE)
        except (ImportError, OSError):
            pass
        self.chunks: collections.deque = collections.deque()
        self.queued = 0  # bytes read ahead, not yet taken
        self.ended = False
        self.cond = threading.Condition()
        threading.Thread(target=self._read_ahead, name="stdin", daemon=True).start()

    def _read_ahead(self) -> None:
        while True:
            with self.cond:
                while self.queued >= READ_AHEAD:
                    self.cond.wait()
            try:
                chunk = os.read(self.fd, READ_SIZE)
            except OSError:
                chunk = b""
            with self.cond:
                if chunk:
                    self.chunks.append(chunk)
                    self.queued += len(chunk)
                else:
                    self.ended = True
                self.cond.notify_all()
            if not chunk:
                return

    def _more(self) -> None:
        with self.cond:
            while not self.chunks and not self.ended:
                self.cond.wait()
            if not self.chunks:
                raise EOFError
            chunk = self.chunks.popleft()
            self.queued -= len(chunk)
            self.cond.notify_all()
        # Only a frame header's head can be left over here: file data is consumed via take().
        self.buf = self.buf[self.pos :] + chunk if self.pos < len(self.buf) else chunk
        self.pos = 0

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            self._more()
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def take(self, n: int) -> memoryview:
        """Between 1 and ``n`` bytes, without copying them out of the buffer."""
        if self.pos >= len(self.buf):
            self._more()
        end = min(len(self.buf), self.pos + n)
        out = memoryview(self.buf)[self.pos : end]
        self.pos = end
        return out


def resolve_dest(dest, home):
    """[sync] dest on this machine: ``~`` the home, ``~/x`` below it, ``/x`` as is, else below the home
    (the laptop's gcptui.remote.dest_path.absolute; tests/unit/test_dest_path.py holds them equal)."""
    if dest == "~" or dest.startswith("~/"):
        dest = home + dest[1:]
    elif not dest.startswith("/"):
        dest = os.path.join(home, dest)
    return os.path.normpath(dest)


class Refused(OSError):
    """An operation the agent will not do: the message says why (sent back as the result's error)."""


class Agent:
    def __init__(self) -> None:
        self.inp = Input(sys.stdin.fileno())
        self.out = sys.stdout.buffer
        self.dest = ""
        self.home = ""
        self.root = -1  # an open descriptor of dest: every path is resolved from it, never by name
        self.ledger: dict = {}
        self.ledger_path = ""
        self.journal: IO[str] | None = None  # not evaluated at run time (function scope)
        self.journal_lines = 0
        self.results: list = []
        self.tmp_seq = 0
        # The client's deflate stream (``zs`` puts): one per session, inflated in frame order.
        self.stream: zlib._Decompress | None = zlib.decompressobj()
        self.stream_error = ""
        # Descriptors of directories (dest-relative) opened in the current batch: saves an openat
        # per path component per file. Closed at every flush and scan, and on any doubt.
        self.dirs: dict = {}
        # Fan-out, as a fetching agent: the relay's (host, port, token), the open connection to
        # it, and why it could not be reached (every later fetch fails at once: direct sync).
        self.relay: tuple[str, int, str] | None = None
        self.relay_sock: socket.socket | None = None
        self.relay_dead = ""

    # -- framing ---------------------------------------------------------------------------------
    def read_frame(self):
        (size,) = struct.unpack(">I", self.inp.read_exact(4))
        if size > MAX_FRAME:
            raise EOFError  # not our client: stop instead of buffering whatever it announces
        return json.loads(self.inp.read_exact(size))

    def reply(self, obj, compress: bool = False) -> None:
        """One reply frame; ``compress``: zlib after a ``z`` byte (a JSON text never starts so).

        A listing of thousands of paths is mostly repeated directory names: ~10x smaller
        compressed, which over a 50 Mbit/s link is most of a cold resync's time.
        """
        data = json.dumps(obj, separators=(",", ":")).encode()
        if compress and len(data) > 1024:
            data = b"z" + zlib.compress(data, 1)
        self.out.write(struct.pack(">I", len(data)) + data)
        self.out.flush()

    # -- paths: every one resolved from self.root, component by component ------------------------
    def forget_dirs(self) -> None:
        for fd in self.dirs.values():
            os.close(fd)
        self.dirs.clear()

    def dir_fd(self, rel_dir: str, create: bool) -> int:
        """An open descriptor of the directory ``rel_dir`` below dest (``""``: dest itself).

        Each component is opened relative to its parent's descriptor with ``O_NOFOLLOW``: a
        symlink (or a file) anywhere below dest is refused, never followed, whatever the VM's
        processes rename meanwhile. ``create`` makes missing directories (reported as mkdirs).
        """
        if not rel_dir:
            return self.root
        fd = self.dirs.get(rel_dir)
        if fd is not None:
            return fd
        if len(self.dirs) >= MAX_CACHED_DIRS:
            self.forget_dirs()
        parts = rel_dir.split("/")
        i = len(parts) - 1
        while i > 0 and "/".join(parts[:i]) not in self.dirs:
            i -= 1  # the longest already-open prefix
        fd = self.dirs["/".join(parts[:i])] if i else self.root
        for j in range(i, len(parts)):
            sub = "/".join(parts[: j + 1])
            name = parts[j]
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                self.record(sub, DIR_KEY)  # journal first: killed right after mkdir, it is still ours
                try:
                    os.mkdir(name, dir_fd=fd)
                except OSError:
                    self.record(sub, None)
                    raise
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError:
                    raise Refused(f"{sub} changed on the VM while sync created it") from None
                e = self.entry_of_fd(child)
                self.record(sub, e)
                self.results.append(["mkdir", sub, e, None])  # the client learns of it too
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise Refused(
                        f"{sub} is not a directory on the VM (sync does not follow links)"
                    ) from None
                raise
            self.dirs[sub] = child
            fd = child
        return fd

    def parent_of(self, rel: str, create: bool):
        """(descriptor of rel's parent directory, rel's last component), after checking ``rel``."""
        if not isinstance(rel, str) or not rel or "\0" in rel or rel.startswith("/"):
            raise ValueError(f"unsafe path {rel!r}")
        head, _, name = rel.rpartition("/")
        if any(p in ("", ".", "..") for p in rel.split("/")):
            raise ValueError(f"unsafe path {rel!r}")
        return self.dir_fd(head, create), name

    @staticmethod
    def entry_of_fd(fd: int):
        st = os.fstat(fd)
        return ["d", 0, 0, stat.S_IMODE(st.st_mode), ""]

    @staticmethod
    def entry_at(fd: int, name: str, st=None):
        """The wire entry of ``name`` in directory ``fd``, never following a link."""
        if st is None:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return ["l", 0, 0, 0, os.readlink(name, dir_fd=fd)]
        if stat.S_ISDIR(st.st_mode):
            return ["d", 0, 0, stat.S_IMODE(st.st_mode), ""]
        if stat.S_ISREG(st.st_mode):
            return ["f", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), ""]
        return ["o", st.st_size, st.st_mtime_ns, 0, ""]

    def make_room(self, rel: str, fd: int, name: str, new_kind: str) -> None:
        """Clear the way for a new ``new_kind`` entry at ``rel``, or refuse.

        A file over a file (or a link over a link) is an ordinary update: the rename replaces it.
        Anything else replaces an entry of another kind, allowed only when sync put that entry
        there and it is unchanged since (the ledger says so); a directory must also be empty.
        """
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        current = self.entry_at(fd, name, st)
        if current[0] == new_kind and new_kind != "d":
            return
        known = self.ledger.get(rel)
        if known is None:
            what = {"d": "a directory", "l": "a link", "f": "a file"}.get(current[0], "a special file")
            raise Refused(f"kept {rel}: {what} on the VM that sync did not put there")
        if current[0] == "d" and known[0] == "d":
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                raise Refused(f"kept directory {rel}: it holds files sync did not put there") from None
            self.forget_dirs()
        elif current[:3] == known:
            os.unlink(name, dir_fd=fd)
        else:
            raise Refused(f"kept {rel}: it changed on the VM since sync wrote it")
        self.record(rel, None)

    # -- ledger ----------------------------------------------------------------------------------
    def landing(self, rel: str, entry, rename) -> None:
        """Journal ``rel`` as ``entry``, then ``rename()`` it into place (undone if that fails).

        Write-ahead: an agent killed between the two (a dropped connection) leaves a ledger that
        names what sync put there; a record of something absent is pruned by the next scan.
        """
        before = self.ledger.get(rel)
        self.record(rel, entry)
        try:
            rename()
        except OSError:
            self.record(rel, before)
            raise

    def record(self, rel: str, entry) -> None:
        value = entry[:3] if entry is not None else None
        if value is None:
            if self.ledger.pop(rel, None) is None:
                return
        else:
            if self.ledger.get(rel) == value:
                return
            self.ledger[rel] = value
        assert self.journal is not None  # opened by op_init before any write
        self.journal.write(json.dumps([rel, value]) + "\n")
        self.journal_lines += 1

    def load_ledger(self) -> None:
        try:
            with open(self.ledger_path) as f:
                data = json.load(f)
            if data.get("dest") == self.dest:
                self.ledger = data.get("entries", {})
        except (OSError, ValueError):
            self.ledger = {}
        replayed = 0
        try:
            with open(self.ledger_path + ".journal") as f:
                for line in f:
                    try:
                        rel, value = json.loads(line)
                    except ValueError:
                        break  # a torn last line from a crash: everything before it counts
                    replayed += 1
                    if value is None:
                        self.ledger.pop(rel, None)
                    else:
                        self.ledger[rel] = value
        except OSError:
            pass
        if replayed:
            self.compact()
        else:  # nothing to fold in: skip rewriting (and fsyncing) the ledger on every start
            self.journal = _private_open(self.ledger_path + ".journal")
            self.journal_lines = 0

    def compact(self) -> None:
        if self.journal is not None:
            self.journal.close()
        tmp = self.ledger_path + ".tmp"
        with _private_open(tmp) as f:
            json.dump({"dest": self.dest, "entries": self.ledger}, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.ledger_path)
        self.journal = _private_open(self.ledger_path + ".journal")
        self.journal_lines = 0

    # -- operations ------------------------------------------------------------------------------
    def open_dest(self):
        """Open dest (following links in its own path, as rsync does); an error text, or None."""
        real = os.path.realpath(self.dest)
        home = self.home
        if real == "/" or real == home or home.startswith(real.rstrip("/") + "/"):
            return (
                f"dest {self.dest!r} is the remote root, home or a parent of home: "
                "sync would mirror onto it; use a project directory such as '~/project'"
            )
        os.makedirs(self.dest, exist_ok=True)
        fd = os.open(self.dest, os.O_RDONLY | os.O_DIRECTORY)
        self.forget_dirs()
        if self.root >= 0:
            os.close(self.root)
        self.root = fd
        return None

    def op_init(self, msg) -> None:
        home = os.path.realpath(os.path.expanduser("~"))
        self.dest, self.home = resolve_dest(msg["dest"].strip(), home), home
        try:
            error = self.open_dest()
        except OSError as err:
            error = f"cannot use dest {self.dest!r} on the VM: {err.strerror or err}"
        if error:
            self.reply({"id": msg.get("id"), "ok": False, "error": error})
            return
        if msg.get("ledger") is False:  # a relay only reads dest: the session's agent owns the ledger
            self.reply({"id": msg.get("id"), "ok": True, "home": home, "dest": self.dest, "ledger": ""})
            return
        state = os.path.join(home, ".gcptui")
        ledger_dir = os.path.join(state, "sync")
        os.makedirs(ledger_dir, mode=0o700, exist_ok=True)
        for path in (state, ledger_dir):  # made before umask 077 was the rule: private now
            os.chmod(path, 0o700)
        digest = hashlib.sha256(os.fsencode(self.dest)).hexdigest()[:16]
        self.ledger_path = os.path.join(ledger_dir, digest + ".json")
        self.load_ledger()
        self.reply(
            {"id": msg.get("id"), "ok": True, "home": home, "dest": self.dest, "ledger": self.ledger_path}
        )

    def op_scan(self, msg) -> None:
        try:  # dest may have been replaced since (a job recreated it): resolve it again
            error = self.open_dest()
        except OSError as err:
            error = f"cannot use dest {self.dest!r} on the VM: {err.strerror or err}"
        if error:
            self.reply({"id": msg.get("id"), "error": error, "entries": [], "ledger": self.ledger})
            return
        entries: list = []
        unlisted: list = []  # directories that could not be opened: their ledger entries stay
        # Depth first, one open descriptor per level (never one per pending sibling: a wide tree
        # would run out of descriptors): no name resolved twice, no link followed.
        stack = [("", os.dup(self.root), self.list_dir("", self.root, entries) or [], 0)]
        try:
            while stack:
                rel_dir, fd, subdirs, i = stack[-1]
                if i == len(subdirs):
                    os.close(fd)
                    stack.pop()
                    continue
                stack[-1] = (rel_dir, fd, subdirs, i + 1)
                name = subdirs[i]
                rel = rel_dir + "/" + name if rel_dir else name
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError:
                    unlisted.append(rel + "/")  # replaced meanwhile, or unreadable: not descended into
                    continue
                children = self.list_dir(rel, child, entries)
                if children is None:
                    os.close(child)
                    unlisted.append(rel + "/")
                    continue
                stack.append((rel, child, children, 0))
        finally:
            for frame in stack:
                os.close(frame[1])
        present = {e[0] for e in entries}
        for rel in [r for r in self.ledger if r not in present]:
            if not any(rel.startswith(prefix) for prefix in unlisted):
                self.record(rel, None)  # gone from the VM: nothing left to own
        if self.journal is not None:
            self.journal.flush()
        if msg.get("digest") and msg["digest"] == view_digest(entries, self.ledger):
            # The client's picture of dest is exact: say so instead of sending it back.
            self.reply({"id": msg.get("id"), "same": True})
            return
        self.reply(
            {"id": msg.get("id"), "entries": entries, "ledger": self.ledger}, compress=bool(msg.get("z"))
        )

    def list_dir(self, rel_dir: str, fd: int, entries: list) -> "list | None":
        """Append the entries of directory ``fd`` to ``entries``; the names of its subdirectories
        (None when it cannot be read)."""
        subdirs: list = []
        try:
            with os.scandir(fd) as it:
                listed = list(it)
        except OSError:
            return None
        for de in listed:
            name = de.name
            if name.startswith(TMP_PREFIX):
                if tmp_orphaned(name):
                    try:
                        os.unlink(name, dir_fd=fd)  # a temp file of an interrupted write: ours
                    except OSError:
                        pass
                continue  # another live agent's write in flight (two sessions on one dest): its own
            try:
                e = self.entry_at(fd, name, de.stat(follow_symlinks=False))
            except OSError:
                continue
            entries.append([rel_dir + "/" + name if rel_dir else name] + e)
            if e[0] == "d":
                subdirs.append(name)
        return subdirs

    def tmp_name(self) -> str:
        self.tmp_seq += 1
        return f"{TMP_PREFIX}{os.getpid()}.{BOOT}.{STARTED}.{self.tmp_seq}"

    def create_tmp(self, rel: str):
        """A new temp file in ``rel``'s directory (made as needed): (parent fd, name, tmp, fd)."""
        parent, name = self.parent_of(rel, True)
        tmp = self.tmp_name()
        try:
            return parent, name, tmp, os.open(tmp, FILE_FLAGS, 0o600, dir_fd=parent)
        except FileNotFoundError:
            if not self.dirs:
                raise
            self.forget_dirs()  # a cached parent was removed meanwhile: resolve the path again
            parent, name = self.parent_of(rel, True)
            return parent, name, tmp, os.open(tmp, FILE_FLAGS, 0o600, dir_fd=parent)

    def op_put(self, msg) -> None:
        rel, size = msg["p"], msg["s"]
        parent = fd = -1
        name = tmp = None
        error = None
        try:
            parent, name, tmp, fd = self.create_tmp(rel)
        except (OSError, ValueError) as err:
            error = err
        packed = msg.get("z")  # the data comes zlib-compressed in this many bytes
        streamed = msg.get("zs")  # ... or as this many bytes of the session's deflate stream
        compressed = packed is not None or streamed is not None
        left = size if not compressed else packed if packed is not None else streamed
        inflate = None
        if streamed is not None:
            inflate = self.stream
            if inflate is None and error is None:
                error = ValueError(f"{rel}: {self.stream_error}")
        elif packed is not None:
            inflate = zlib.decompressobj()
        written = 0
        try:
            if msg.get("k"):  # chunked (a large raw file): the client may abort it midway
                written, error = self.take_chunks(fd, error)
                left = 0
                if error is None and written != size:
                    error = ValueError(f"{rel}: held {written} of {size} bytes")
            while left:  # always consume the data, even after an error, to stay in frame
                chunk = self.inp.take(left)
                left -= len(chunk)
                data: bytes | memoryview = chunk  # (local annotations are never evaluated)
                if compressed:
                    # The stream is inflated even for a put that failed: later puts continue it.
                    if inflate is None:
                        continue
                    try:  # never more than the header announced
                        data = inflate.decompress(chunk, size + 1 - written)
                        if inflate.unconsumed_tail:
                            raise ValueError(f"compressed data inflates past {size} bytes")
                    except (ValueError, zlib.error) as err:
                        inflate = None
                        if streamed is not None:
                            self.break_stream(rel, err)
                        if error is None:
                            error = ValueError(f"{rel}: {err}")
                        continue
                written += len(data)
                if error is None:
                    try:
                        _write_all(fd, data)
                    except OSError as err:
                        error = err
        except BaseException:
            # The input ended (or failed) mid-file: no later put will clean this temp file up.
            self.discard_tmp(fd, parent, tmp)
            raise
        if inflate is not None and (written != size or (packed is not None and not inflate.eof)):
            if streamed is not None:
                self.break_stream(rel, f"held {written} of {size} bytes")
            if error is None:
                error = ValueError(f"{rel}: compressed data held {written} of {size} bytes")
        self.land("put", msg, parent, name, tmp, fd, error)

    def land(self, op: str, msg, parent: int, name, tmp, fd: int, error) -> None:
        """Give the temp file its mode and mtime and rename it to its path (or discard it, after
        ``error``); the result goes to the client as ``op``'s."""
        rel = msg["p"]
        try:
            if error is not None:
                raise error
            os.fchmod(fd, msg["m"] & 0o7777)
            os.utime(fd, ns=(msg["t"], msg["t"]))
            st = os.fstat(fd)  # the same inode lands at name: no stat after the rename
            os.close(fd)
            fd = -1
            assert tmp is not None and name is not None  # set whenever error is None
            self.make_room(rel, parent, name, "f")
            e = ["f", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), ""]
            self.landing(rel, e, lambda: os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent))
            tmp = None
            self.results.append([op, rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append([op, rel, None, _describe(err)])
        finally:
            self.discard_tmp(fd, parent, tmp)  # nothing left once the file landed (fd -1, tmp None)

    # -- fan-out: fetching from a relay VM ---------------------------------------------------------
    def op_relay(self, msg) -> None:
        """Fetch from this relay from now on (a new one replaces the old)."""
        self.drop_relay()
        self.relay, self.relay_dead = (str(msg["host"]), int(msg["port"]), str(msg["token"])), ""
        self.reply({"id": msg.get("id"), "ok": True})

    def drop_relay(self) -> None:
        if self.relay_sock is not None:
            self.relay_sock.close()
            self.relay_sock = None

    def relay_conn(self) -> socket.socket:
        if self.relay_dead or self.relay is None:
            raise ConnectionError(RELAY_UNREACHABLE + (self.relay_dead or "no relay named"))
        if self.relay_sock is None:
            host, port, token = self.relay
            try:
                sock = socket.create_connection((host, port), timeout=RELAY_CONNECT_S)
            except OSError as err:
                self.relay_dead = f"{host}:{port}: {_describe(err)}"
                raise ConnectionError(RELAY_UNREACHABLE + self.relay_dead) from None
            sock.settimeout(RELAY_WAIT_S + 10)
            # Small request and reply writes back to back: without this, Nagle's algorithm and the
            # peer's delayed ACK hold each reply ~40 ms (a thousand small files: 40 s).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(token.encode() + b"\n")
            self.relay_sock = sock
        return self.relay_sock

    def op_fetch(self, msg) -> None:
        """Files whose bytes come from the relay (``f``: [path, size, mode, mtime_ns, sha256] each),
        each landing like a put, and only if its bytes hash to its digest. Requests run up to
        RELAY_WINDOW ahead of the file being written: the relay streams them back to back instead
        of one round trip (and, on a busy machine, a few thread wake-ups) per file."""
        files = msg["f"]
        try:
            sock: socket.socket | None = self.relay_conn()
        except OSError as err:
            sock, lost = None, str(err)
        asked = 0
        for i, (rel, size, mode, mtime_ns, digest) in enumerate(files):
            while sock is not None and asked < len(files) and asked - i < RELAY_WINDOW:
                p, s, _, t, h = files[asked]
                try:
                    sock.sendall(json.dumps({"p": p, "s": s, "t": t, "h": h}).encode() + b"\n")
                except OSError as err:
                    sock, lost = None, f"relay connection lost: {_describe(err)}"
                    self.drop_relay()
                    break
                asked += 1
            one = {"p": rel, "s": size, "m": mode, "t": mtime_ns}
            parent = fd = -1
            name = tmp = None
            error: Exception | None = None
            try:
                parent, name, tmp, fd = self.create_tmp(rel)
            except (OSError, ValueError) as err:
                error = err  # its reply still comes: read and dropped below, to stay in step
            if sock is None or i >= asked:
                error = error or ConnectionError(lost)
            else:
                try:
                    self.take_relayed(sock, fd if error is None else -1, size, digest)
                except ValueError as err:  # a refusal or other bytes: the stream is still in step
                    error = error or err
                except OSError as err:  # gone, or out of step: the rest go direct
                    error, lost = error or err, f"relay connection lost: {_describe(err)}"
                    sock = None
                    self.drop_relay()
            self.land("fetch", one, parent, name, tmp, fd, error)

    @staticmethod
    def take_relayed(sock: socket.socket, fd: int, size: int, digest: str) -> None:
        """One reply's file into ``fd`` (-1: read and dropped). ValueError: refused, or other bytes
        (the stream stays in step); OSError: the connection is gone or out of step."""
        (n,) = struct.unpack(">q", _recv_exact(sock, 8))
        if n < 0:
            raise ValueError("the relay refused: " + _recv_exact(sock, -n).decode("utf-8", "replace"))
        if n != size:
            raise ConnectionError(f"the relay offered {n} bytes, not {size}")
        h = hashlib.sha256()
        left, failed = n, None
        while left:
            chunk = sock.recv(min(left, READ_SIZE))
            if not chunk:
                raise ConnectionError("the relay hung up mid-file")
            h.update(chunk)
            left -= len(chunk)
            if fd >= 0 and failed is None:
                try:
                    _write_all(fd, chunk)
                except OSError as err:
                    failed = err  # the rest is still read: the stream stays in step
        if failed is not None:
            raise ValueError(_describe(failed))
        if not hmac.compare_digest(h.hexdigest(), digest):
            raise ValueError("the relayed bytes do not match the laptop's digest")

    # -- fan-out: serving as the relay -------------------------------------------------------------
    def op_serve(self, msg) -> None:
        """Listen on ``host`` (the VM's internal address) for fetching agents holding ``token``."""
        try:
            family = socket.getaddrinfo(str(msg["host"]), 0, type=socket.SOCK_STREAM)[0][0]
            server = socket.socket(family, socket.SOCK_STREAM)
            server.bind((str(msg["host"]), 0))
            server.listen(64)
        except OSError as err:
            self.reply({"id": msg.get("id"), "error": f"cannot listen on {msg['host']}: {_describe(err)}"})
            return
        token = str(msg["token"]).encode()
        threading.Thread(target=self.accept_loop, args=(server, token), name="relay", daemon=True).start()
        self.reply({"id": msg.get("id"), "port": server.getsockname()[1]})

    def accept_loop(self, server: socket.socket, token: bytes) -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self.serve_conn, args=(conn, token), daemon=True).start()

    def serve_conn(self, conn: socket.socket, token: bytes) -> None:
        hashed: dict = {}  # (size, mtime_ns, inode) -> sha256: a file asked for twice is read once
        with conn:
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # see relay_conn
                conn.settimeout(RELAY_WAIT_S + 10)  # a silent peer (no token, gone) frees its thread
                reader = conn.makefile("rb")
                if not hmac.compare_digest(reader.readline(RELAY_LINE).rstrip(b"\n"), token):
                    return
                while True:
                    line = reader.readline(RELAY_LINE)
                    if not line:
                        return
                    ask = json.loads(line)
                    self.serve_one(
                        conn, str(ask["p"]), int(ask["s"]), int(ask.get("t", -1)), str(ask["h"]), hashed
                    )
            except (OSError, ValueError, KeyError, TypeError):
                return  # a client out of step, or gone: it falls back to the laptop

    def serve_one(
        self, conn: socket.socket, rel: str, size: int, mtime_ns: int, digest: str, hashed: dict
    ) -> None:
        """Send ``rel`` once it is a regular file of ``size`` bytes hashing to ``digest`` (waiting
        for the laptop's copy to land, up to RELAY_WAIT_S), else a refusal. A file with the size and
        mtime the laptop gave it is sent without hashing it first: the fetcher checks the digest."""
        deadline, delay = time.monotonic() + RELAY_WAIT_S, 0.002
        while True:
            try:
                fd = self.open_below(rel)
            except ValueError as err:  # never servable: say so at once
                why = str(err).encode()
                conn.sendall(struct.pack(">q", -len(why)) + why)
                return
            if fd >= 0:
                try:
                    st = os.fstat(fd)
                    if stat.S_ISREG(st.st_mode) and st.st_size == size:
                        key = (st.st_size, st.st_mtime_ns, st.st_ino)
                        if st.st_mtime_ns == mtime_ns:
                            hashed[key] = digest  # as the laptop sent it; the fetcher verifies
                        elif key not in hashed:
                            hashed[key] = _sha256_fd(fd)
                        if hashed[key] == digest:
                            os.lseek(fd, 0, os.SEEK_SET)
                            _send_fd(conn, fd, size, struct.pack(">q", size))
                            return
                finally:
                    os.close(fd)
            if time.monotonic() > deadline:
                why = f"{rel} did not arrive with the laptop's bytes".encode()
                conn.sendall(struct.pack(">q", -len(why)) + why)
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 0.02)

    def open_below(self, rel: str) -> int:
        """A read descriptor of the regular file ``rel`` below dest, never through a link; -1 when
        it is not there (yet); ValueError for a path that leaves dest or passes a link. Thread-safe:
        it shares no cached descriptor with the main thread."""
        parts = rel.split("/")
        if not rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"unsafe path {rel!r}")
        fd = self.root
        try:
            for part in parts[:-1]:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
                if fd != self.root:
                    os.close(fd)
                fd = child
            return os.open(parts[-1], READ_FLAGS, dir_fd=fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise ValueError(f"{rel} passes a link or a file on the relay: not served") from None
            return -1
        finally:
            if fd != self.root:
                os.close(fd)

    @staticmethod
    def discard_tmp(fd: int, parent: int, tmp) -> None:
        """Close and delete a temp file that will not land."""
        if fd >= 0:
            os.close(fd)
        if tmp is not None and parent >= 0:
            try:
                os.unlink(tmp, dir_fd=parent)
            except OSError:
                pass

    def take_chunks(self, fd: int, error):
        """Write length-prefixed chunks to ``fd`` up to the end mark: (bytes taken, error).

        The abort mark (the file changed or failed while the client read it) discards the file:
        it must never land torn. Data is always consumed, even after an error, to stay in frame.
        """
        written = 0
        while True:
            (n,) = struct.unpack(">I", self.inp.read_exact(4))
            if n == 0:
                return written, error
            if n == CHUNK_ABORT:
                return written, error if error is not None else Refused(ABORTED)
            while n:
                chunk = self.inp.take(n)
                n -= len(chunk)
                written += len(chunk)
                if error is None:
                    try:
                        _write_all(fd, chunk)
                    except OSError as err:
                        error = err

    def break_stream(self, rel: str, why) -> None:
        """The session's deflate stream is out of step: every later ``zs`` put fails (in frame)."""
        self.stream = None
        self.stream_error = f"the compressed stream broke at {rel} ({why}); restart the sync"

    def op_link(self, msg) -> None:
        rel = msg["p"]
        try:
            parent, name = self.parent_of(rel, True)
            tmp = self.tmp_name()
            os.symlink(msg["target"], tmp, dir_fd=parent)
            try:
                self.make_room(rel, parent, name, "l")
                self.landing(
                    rel, LINK_KEY, lambda: os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
                )
            except OSError:
                os.unlink(tmp, dir_fd=parent)
                raise
            e = self.entry_at(parent, name)
            self.record(rel, e)
            self.results.append(["link", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["link", rel, None, _describe(err)])

    def op_mkdir(self, msg) -> None:
        """Make ``rel`` a directory with mode ``m``; a directory already there only changes mode."""
        rel = msg["p"]
        try:
            parent, name = self.parent_of(rel, True)
            fd = self.open_existing_dir(parent, name)
            existed = fd >= 0
            if fd < 0:
                self.make_room(rel, parent, name, "d")
                self.record(rel, DIR_KEY)  # journal first (see dir_fd)
                try:
                    os.mkdir(name, dir_fd=parent)
                except FileExistsError:
                    pass
                try:
                    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
                except OSError as err:
                    if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise Refused(
                            f"kept {rel}: it changed on the VM while sync made it a directory"
                        ) from None
                    raise
            if rel in self.dirs:
                os.close(self.dirs.pop(rel))
            self.dirs[rel] = fd
            if msg.get("m"):
                try:
                    os.fchmod(fd, msg["m"] & 0o7777)  # on the descriptor: never a link's target
                except PermissionError as err:
                    if not existed:
                        raise
                    # The VM's own directory, another user's (a container made it): it stays as
                    # it is and unowned; the client counts this as a warning only.
                    raise Refused(f"{KEPT_MODE}{rel}: {err.strerror} (another user's directory)") from None
            e = self.entry_of_fd(fd)
            self.record(rel, e)
            self.results.append(["mkdir", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["mkdir", rel, None, _describe(err)])

    @staticmethod
    def open_existing_dir(parent: int, name: str) -> int:
        """A descriptor of the directory ``name`` (never a link's target), or -1 when there is none."""
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                return -1  # missing, or another kind: make_room decides
            raise

    def op_own(self, msg) -> None:
        """The VM already holds what the local tree has here: record it as synced."""
        rel = msg["p"]
        try:
            parent, name = self.parent_of(rel, False)
            e = self.entry_at(parent, name)
            expected = msg.get("x")
            if expected is not None and [e[0], e[1], e[2], e[4]] != expected:
                raise Refused(f"kept {rel} unowned: it changed on the VM since it was listed")
            self.record(rel, e)
            self.results.append(["own", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["own", rel, None, _describe(err)])

    def op_rm(self, msg) -> None:
        rel = msg["p"]
        try:
            known = self.ledger.get(rel)
            if known is None:
                raise Refused(f"kept {rel}: sync did not put it there")
            try:
                parent, name = self.parent_of(rel, False)
                current = self.entry_at(parent, name)
            except FileNotFoundError:
                self.record(rel, None)
                self.results.append(["rm", rel, None, None])
                return
            if current[0] == "d" and known[0] == "d":
                try:
                    os.rmdir(name, dir_fd=parent)
                except OSError:
                    raise Refused(f"kept directory {rel}: it holds files sync did not put there") from None
                self.forget_dirs()
            elif current[:3] == known:
                os.unlink(name, dir_fd=parent)  # a link swapped in meanwhile is removed, not followed
            else:
                raise Refused(f"kept {rel}: it changed on the VM since sync wrote it")
            self.record(rel, None)
            self.results.append(["rm", rel, None, None])
        except (OSError, ValueError) as err:
            self.results.append(["rm", rel, None, _describe(err)])

    def op_flush(self, msg) -> None:
        self.forget_dirs()  # the VM's own processes may change the tree between batches
        if self.journal is not None:
            self.journal.flush()
        results, self.results = self.results, []
        self.reply({"id": msg.get("id"), "results": results})
        if self.journal_lines > 20000:
            self.compact()

    def run(self) -> None:
        handlers = {
            "init": self.op_init, "scan": self.op_scan, "put": self.op_put, "link": self.op_link,
            "mkdir": self.op_mkdir, "own": self.op_own, "rm": self.op_rm, "flush": self.op_flush,
            "serve": self.op_serve, "relay": self.op_relay, "fetch": self.op_fetch,
        }  # fmt: skip
        while True:
            try:
                msg = self.read_frame()
                if msg is None:
                    break
                handlers[msg["op"]](msg)
            except EOFError:
                break
        if self.journal is not None:
            self.journal.close()


def view_digest(entries, ledger) -> str:
    """SHA-256 of a listing (rows of kind f, d or l) and the ledger, in a canonical form.

    The client computes the same over what it believes dest holds (agent_client.view_digest):
    equal digests mean the listing would tell it nothing new. Keep the two in step. Strings are
    length-prefixed, so no file name can make two different views read alike; lines are sorted,
    so the order of the listing does not matter.
    """
    rows = sorted(
        f"{len(r[0])}:{r[0]}{r[1]}.{r[2]}.{r[3]}.{r[4]}.{len(r[5])}:{r[5]}"
        for r in entries
        if r[1] in ("f", "d", "l")
    )
    held = sorted(f"{len(rel)}:{rel}" + ".".join(map(str, value)) for rel, value in ledger.items())
    text = "\n".join(rows) + "\n\n" + "\n".join(held)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _boot_id() -> str:
    """This boot's identity (a pid names the same process only within one boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip().replace("-", "")[:12] or "0"
    except OSError:
        return "0"


BOOT = _boot_id()


def _started(pid: "int | str") -> str:
    """When process ``pid`` started, in clock ticks since boot (/proc/PID/stat field 22): with the
    pid and the boot it names one process, even once the pid is reused. "0" where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the name, in brackets, may hold spaces
        return fields[19] if len(fields) > 19 and fields[19].isdigit() else "0"
    except OSError:
        return "0"


STARTED = _started("self")


def tmp_orphaned(name: str) -> bool:
    """True when the temp file ``name`` belongs to no running agent: its writer died mid-write.

    Temp names carry the pid of the agent writing them, the boot and the agent's start time; two
    sessions may share a dest (the TUI following while ``job start`` syncs), and one's scan must not
    delete the file the other is filling. The start time tells a reused pid from the writer (where
    /proc cannot say, "0": the pid alone decides). A name of an older agent's form counts as
    orphaned only when its pid is gone.
    """
    parts = name[len(TMP_PREFIX) :].split(".")
    if len(parts) not in (2, 3, 4) or (len(parts) >= 3 and parts[1] != BOOT):
        return True
    if len(parts) == 4 and parts[2] != "0":
        now = _started(parts[0]) if parts[0].isdigit() else "0"
        if now != "0" and now != parts[2]:
            return True  # the pid now names another process: the writer is gone
    pid = parts[0]
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, OverflowError):
        return True
    except OSError:
        return False  # alive (another user's: EPERM)
    return False


def _describe(err: Exception) -> str:
    """One line for the client: refusals carry their own text; OS errors their reason."""
    if isinstance(err, Refused) or not isinstance(err, OSError) or not err.strerror:
        return str(err)
    return err.strerror


def _private_open(path: str) -> IO[str]:
    """Open ``path`` for writing (truncated), readable by its owner only.

    Line buffered: each journal record reaches the OS as it is written, so an agent killed
    mid-batch (a dropped connection, SIGKILL) still leaves the ledger knowing what sync made.
    Appending: an older agent still finishing (a reconnect can overlap it briefly) adds its
    records at the end of the journal a newer agent started, instead of writing over them.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w", buffering=1)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the relay hung up")
        data += chunk
    return data


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            return h.hexdigest()
        h.update(chunk)


def _send_fd(conn: socket.socket, fd: int, size: int, head: bytes) -> None:
    """Send ``head`` and then ``size`` bytes of ``fd`` from where it is (a small file in one write;
    a file that shrank meanwhile breaks the connection: the fetcher sees it)."""
    left = size
    while True:
        chunk = os.read(fd, min(left, READ_SIZE)) if left else b""
        if left and not chunk:
            raise ConnectionError("the file shrank while relayed")
        conn.sendall(head + chunk)
        head = b""
        left -= len(chunk)
        if not left:
            return


def _write_all(fd: int, data: "bytes | memoryview") -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":
    os.umask(0o022)
    Agent().run()
