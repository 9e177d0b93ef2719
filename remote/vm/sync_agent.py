"""The far end of a sync session: runs ON the VM, started as ``python3 -I -S -c <this source>``.

Standard library only, no imports from gcptui. It speaks a framed protocol on stdin/stdout:
every frame is a 4-byte big-endian length and a JSON header; a ``put`` header is followed by
exactly ``s`` bytes of file data. Operations are pipelined: the client sends many and asks for
their results with one ``flush``. Replies are frames too.

The agent keeps the sync ledger: the record of every path sync put under ``dest``, with the
kind, size and mtime it had right after sync wrote it. It deletes only paths in that record
whose current state still matches it, so files written on the VM by anything else (training
outputs, checkpoints, a file sync wrote that training later changed) are never removed.
The ledger lives beside the home, not in ``dest``: ``~/.gcptui/sync/<sha256(dest)[:16]>.json``
plus an append-only ``.journal`` of changes since, replayed on load and folded in by ``compact``.
"""

import hashlib
import json
import os
import stat
import struct
import sys
from typing import IO

TMP_PREFIX = ".gcptui-tmp."
# stdin is read in big chunks into our own buffer: sshd refills the pipe (and sends the client a
# window adjust) per read, so 8 KiB reads meant one SSH round of packets per 8 KiB on both ends.
READ_SIZE = 1 << 20
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, named only from Python 3.10 on


class Input:
    """Frames and file data from stdin, from a buffer filled by large ``os.read`` calls."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.pos = 0
        try:  # a 1 MiB pipe lets sshd hand over more per wake-up; not a pipe, or refused: fine
            import fcntl

            fcntl.fcntl(fd, F_SETPIPE_SZ, READ_SIZE)
        except (ImportError, OSError):
            pass

    def _more(self) -> None:
        chunk = os.read(self.fd, READ_SIZE)
        if not chunk:
            raise EOFError
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


class Agent:
    def __init__(self) -> None:
        self.inp = Input(sys.stdin.fileno())
        self.out = sys.stdout.buffer
        self.dest = ""
        self.ledger: dict = {}
        self.ledger_path = ""
        self.journal: IO[str] | None = None  # not evaluated at run time (function scope)
        self.journal_lines = 0
        self.results: list = []
        self.tmp_seq = 0
        # Directories (dest-relative) seen to exist in the current batch: saves an lstat per
        # path component per file. Forgotten at every flush and scan, and on any doubt.
        self.dirs: set = set()

    # -- framing ---------------------------------------------------------------------------------
    def read_frame(self):
        (size,) = struct.unpack(">I", self.inp.read_exact(4))
        return json.loads(self.inp.read_exact(size))

    def reply(self, obj) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.out.write(struct.pack(">I", len(data)) + data)
        self.out.flush()

    # -- paths -----------------------------------------------------------------------------------
    def full(self, rel: str) -> str:
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"unsafe path {rel!r}")
        return os.path.join(self.dest, rel)

    def entry(self, path: str):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return ["l", 0, 0, 0, os.readlink(path)]
        if stat.S_ISDIR(st.st_mode):
            return ["d", 0, 0, stat.S_IMODE(st.st_mode), ""]
        if stat.S_ISREG(st.st_mode):
            return ["f", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), ""]
        return ["o", st.st_size, st.st_mtime_ns, 0, ""]

    # -- ledger ----------------------------------------------------------------------------------
    def record(self, rel: str, entry) -> None:
        value = entry[:3] if entry is not None else None
        if value is None:
            if self.ledger.pop(rel, None) is None:
                return
        else:
            if self.ledger.get(rel) == value:
                return
            self.ledger[rel] = value
        assert self.journal is not None  # opened by op_scan before any write
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
            self.journal = open(self.ledger_path + ".journal", "w")
            self.journal_lines = 0

    def compact(self) -> None:
        if self.journal is not None:
            self.journal.close()
        tmp = self.ledger_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"dest": self.dest, "entries": self.ledger}, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.ledger_path)
        self.journal = open(self.ledger_path + ".journal", "w")
        self.journal_lines = 0

    # -- operations ------------------------------------------------------------------------------
    def op_init(self, msg) -> None:
        home = os.path.realpath(os.path.expanduser("~"))
        dest = msg["dest"].strip()
        if dest == "~" or dest.startswith("~/"):
            dest = home + dest[1:]
        elif not dest.startswith("/"):
            dest = os.path.join(home, dest)
        dest = os.path.normpath(dest)
        real = os.path.realpath(dest)
        if real == "/" or real == home or home.startswith(real.rstrip("/") + "/"):
            self.reply(
                {
                    "ok": False,
                    "error": f"dest {dest!r} is the remote root, home or a parent of home: "
                    "sync would mirror onto it; use a project directory such as '~/project'",
                }
            )
            return
        os.makedirs(dest, exist_ok=True)
        self.dest = dest
        ledger_dir = os.path.join(home, ".gcptui", "sync")
        os.makedirs(ledger_dir, exist_ok=True)
        digest = hashlib.sha256(os.fsencode(dest)).hexdigest()[:16]
        self.ledger_path = os.path.join(ledger_dir, digest + ".json")
        self.load_ledger()
        self.reply({"ok": True, "home": home, "dest": dest, "ledger": self.ledger_path})

    def op_scan(self, msg) -> None:
        self.dirs.clear()
        entries = []
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            base = os.path.join(self.dest, rel_dir) if rel_dir else self.dest
            try:
                it = os.scandir(base)
            except OSError:
                continue
            with it:
                for de in it:
                    rel = rel_dir + "/" + de.name if rel_dir else de.name
                    if de.name.startswith(TMP_PREFIX):
                        try:
                            os.unlink(de.path)  # a temp file of an interrupted write: ours, never complete
                        except OSError:
                            pass
                        continue
                    try:
                        e = self.entry(de.path)
                    except OSError:
                        continue
                    entries.append([rel] + e)
                    if e[0] == "d":
                        stack.append(rel)
        present = {e[0] for e in entries}
        for rel in [r for r in self.ledger if r not in present]:
            self.record(rel, None)  # gone from the VM: nothing left to own
        if self.journal is not None:
            self.journal.flush()
        self.reply({"entries": entries, "ledger": self.ledger})

    def ensure_parent(self, rel: str) -> None:
        parent = rel.rpartition("/")[0]
        if not parent or parent in self.dirs:
            return
        parts = parent.split("/")
        for i in range(len(parts)):
            sub = "/".join(parts[: i + 1])
            if sub in self.dirs:
                continue
            path = os.path.join(self.dest, sub)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                os.mkdir(path)
                e = self.entry(path)
                self.record(sub, e)
                self.results.append(["mkdir", sub, e, None])  # the client learns of it too
                self.dirs.add(sub)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(f"{sub} is not a directory on the VM")
            self.dirs.add(sub)

    def clear_dir_for(self, rel: str, path: str) -> None:
        """A file or link replaces a directory: only an empty one sync made may go."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            if rel not in self.ledger:
                raise OSError(f"{rel} is a directory on the VM that sync did not create")
            os.rmdir(path)
            self.dirs.clear()
            self.record(rel, None)

    def tmp_name(self, path: str) -> str:
        self.tmp_seq += 1
        head = os.path.dirname(path)
        return os.path.join(head, f"{TMP_PREFIX}{os.getpid()}.{self.tmp_seq}")

    def create_tmp(self, rel: str, path: str):
        """A new temp file beside ``path`` (its parents made as needed): (name, fd)."""
        self.ensure_parent(rel)
        tmp = self.tmp_name(path)
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except (FileNotFoundError, NotADirectoryError):
            if not self.dirs:
                raise
            self.dirs.clear()  # a cached parent went away meanwhile: check the path again
            self.ensure_parent(rel)
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def land(self, rel: str, tmp: str, path: str) -> None:
        """Rename the finished temp file onto ``path``: readers see the old file or the new, whole."""
        try:
            os.rename(tmp, path)
        except IsADirectoryError:  # rare: ask first only when needed, one lstat fewer per file
            self.clear_dir_for(rel, path)
            os.rename(tmp, path)

    def op_put(self, msg) -> None:
        rel, size = msg["p"], msg["s"]
        tmp = None
        fd = -1
        error = None
        try:
            path = self.full(rel)
            tmp, fd = self.create_tmp(rel, path)
        except (OSError, ValueError) as err:
            error = err
        left = size
        while left:  # always consume the data, even after an error, to stay in frame
            data = self.inp.take(left)
            left -= len(data)
            if error is None:
                try:
                    _write_all(fd, data)
                except OSError as err:
                    error = err
        try:
            if error is not None:
                raise error
            os.fchmod(fd, msg["m"] & 0o7777)
            os.utime(fd, ns=(msg["t"], msg["t"]))
            st = os.fstat(fd)  # the same inode lands at path: no lstat after the rename
            os.close(fd)
            fd = -1
            assert tmp is not None
            self.land(rel, tmp, path)
            tmp = None
            e = ["f", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), ""]
            self.record(rel, e)
            self.results.append(["put", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["put", rel, None, str(err)])
        finally:
            if fd >= 0:
                os.close(fd)
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def op_link(self, msg) -> None:
        rel = msg["p"]
        try:
            path = self.full(rel)
            self.ensure_parent(rel)
            tmp = self.tmp_name(path)
            os.symlink(msg["target"], tmp)
            try:
                self.clear_dir_for(rel, path)
                os.rename(tmp, path)
            except OSError:
                os.unlink(tmp)
                raise
            e = self.entry(path)
            self.record(rel, e)
            self.results.append(["link", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["link", rel, None, str(err)])

    def op_mkdir(self, msg) -> None:
        rel = msg["p"]
        try:
            path = self.full(rel)
            self.ensure_parent(rel)
            try:
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(path)  # the local tree has a directory here: a file or link gives way
                    os.mkdir(path)
            except FileNotFoundError:
                os.mkdir(path)
            if msg.get("m"):
                os.chmod(path, msg["m"] & 0o7777)
            e = self.entry(path)
            self.dirs.add(rel)
            self.record(rel, e)
            self.results.append(["mkdir", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["mkdir", rel, None, str(err)])

    def op_own(self, msg) -> None:
        """The VM already holds what the local tree has here: record it as synced."""
        rel = msg["p"]
        try:
            e = self.entry(self.full(rel))
            self.record(rel, e)
            self.results.append(["own", rel, e, None])
        except (OSError, ValueError) as err:
            self.results.append(["own", rel, None, str(err)])

    def op_rm(self, msg) -> None:
        rel = msg["p"]
        try:
            path = self.full(rel)
            known = self.ledger.get(rel)
            if known is None:
                raise OSError(f"kept {rel}: sync did not put it there")
            try:
                current = self.entry(path)
            except FileNotFoundError:
                self.record(rel, None)
                self.results.append(["rm", rel, None, None])
                return
            if current[0] == "d" and known[0] == "d":
                try:
                    os.rmdir(path)
                    self.dirs.clear()
                except OSError:
                    raise OSError(f"kept directory {rel}: it holds files sync did not put there") from None
            elif current[:3] == known:
                os.unlink(path)
            else:
                raise OSError(f"kept {rel}: it changed on the VM since sync wrote it")
            self.record(rel, None)
            self.results.append(["rm", rel, None, None])
        except (OSError, ValueError) as err:
            self.results.append(["rm", rel, None, str(err)])

    def op_flush(self, msg) -> None:
        self.dirs.clear()  # the VM's own processes may change the tree between batches
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


def _write_all(fd: int, data: "bytes | memoryview") -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":
    os.umask(0o022)
    Agent().run()
