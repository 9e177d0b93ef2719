"""gcptui's pull reader: lists a run folder and streams its files over stdin/stdout, for pulls over
an exec channel without SFTP (a GKE pod's Kubernetes exec).

Runs on the machine as ``python3 -I -S -c <this file>``, standard library only, any python3.
Everything it sends is checked again on the laptop (``transfer/exec_pull.py``), which trusts none
of it: names, sizes, times and the byte counts of the stream.

Requests are lines of JSON on stdin; every answer is a frame, a 4-byte big-endian length and then
that many bytes:

- ``{"op": "list", "path": P}`` (P relative to the home, or absolute; P itself is followed when a
  link, nothing below it is): one frame of JSON, ``{"kind": "file", "size": N, "mtime": T}``,
  ``{"kind": "dir", "files": [[RELATIVE, SIZE, MTIME], ...]}`` (regular files only, ``/``-joined) or
  ``{"error": "..."}`` (``"missing": true`` when P does not exist).
- ``{"op": "read", "path": P, "files": [[RELATIVE, OFFSET, LENGTH], ...]}`` (RELATIVE "" for P
  itself): for each file in order, a frame of JSON (``{"ok": 1}``, ``{"gone": 1}``, or
  ``{"error": "..."}``) and after ``ok`` its bytes from OFFSET, at most LENGTH, in frames of at most
  ``CHUNK`` bytes, then an empty frame.
"""

import json
import os
import stat
import struct
import sys

CHUNK = 1 << 20
MAX_LISTING = 64 << 20  # bytes of one listing frame: the laptop refuses a bigger one
MAX_MTIME = 1 << 40

out = sys.stdout.buffer


def frame(data):
    out.write(struct.pack(">I", len(data)))
    if data:
        out.write(data)


def send(obj):
    frame(json.dumps(obj, separators=(",", ":")).encode())


def mtime(st):
    value = int(st.st_mtime)
    return value if 0 <= value <= MAX_MTIME else 0


def error_text(err):
    return (err.strerror or str(err))[:200]


def listing(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"error": "no such file", "missing": True}
    except OSError as err:
        return {"error": error_text(err)}
    if stat.S_ISREG(st.st_mode):
        return {"kind": "file", "size": st.st_size, "mtime": mtime(st)}
    if not stat.S_ISDIR(st.st_mode):
        return {"error": "neither a file nor a directory"}
    files = []
    used = 0
    folders = [(path, "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue  # removed while listed
        except OSError as err:
            return {"error": f"cannot read {folder}: {error_text(err)}"}
        for entry in entries:
            relative = prefix + "/" + entry.name if prefix else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append((entry.path, relative))
                elif entry.is_file(follow_symlinks=False):
                    est = entry.stat(follow_symlinks=False)
                    files.append([relative, est.st_size, mtime(est)])
                    used += len(relative) + 40
            except OSError:
                continue  # gone meanwhile
            if used > MAX_LISTING:
                return {"error": f"over {MAX_LISTING >> 20} MiB of names: pull a smaller folder"}
    return {"kind": "dir", "files": files}


def serve_file(path, offset, length):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        send({"gone": 1})
        return
    except OSError as err:
        send({"error": error_text(err)})
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            send({"error": "not a regular file"})
            return
        os.lseek(fd, offset, os.SEEK_SET)
        send({"ok": 1})
        left = length
        while left > 0:
            try:
                data = os.read(fd, min(CHUNK, left))
            except OSError:
                break  # what came stands; the laptop sees the file end short
            if not data:
                break
            frame(data)
            left -= len(data)
        frame(b"")
    finally:
        os.close(fd)


def main():
    # Paths are the home's, as SFTP reads them, wherever the exec starts (a container's workdir).
    try:
        os.chdir(os.path.expanduser("~"))
    except OSError:
        pass
    for line in sys.stdin.buffer:
        request = json.loads(line)
        path = request["path"]
        if request["op"] == "list":
            send(listing(path))
        elif request["op"] == "read":
            for relative, offset, length in request["files"]:
                serve_file(os.path.join(path, relative) if relative else path, offset, length)
        out.flush()


main()
