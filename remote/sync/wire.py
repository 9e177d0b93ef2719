"""What travels between the client and the agent besides frames: the view digest both sides
compute, small files' content digests, and the deflate stream that small sources share."""

from __future__ import annotations

import hashlib
import zlib

from gcptui.remote.sync.manifest import Entry


def view_digest(entries: dict[str, Entry], ledger: dict[str, list]) -> str:
    """The digest the agent computes over its listing and ledger (sync_agent.view_digest)."""
    rows = sorted(
        f"{len(rel)}:{rel}{e.kind}.{e.size}.{e.mtime_ns}.{e.mode}.{len(e.target)}:{e.target}"
        for rel, e in entries.items()
    )
    held = sorted(f"{len(rel)}:{rel}" + ".".join(map(str, value)) for rel, value in ledger.items())
    text = "\n".join(rows) + "\n\n" + "\n".join(held)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def content_digest(data: bytes) -> bytes:
    """What identifies a small file's bytes (to tell, without sending, whether they changed)."""
    return hashlib.blake2b(data, digest_size=16).digest()


class Packer:
    """Decides, per file, whether its data travels compressed, and compresses it.

    Source code shrinks 3-5x, which over a WAN is most of a first sync's time. Compressed data
    goes through one deflate stream per agent (level 4, each file ended by a sync flush), as
    rsync's ``-z`` does: small sources then compress against the ones sent before them (a 1 KB
    file alone hardly shrinks), and level 4 on a stream shrinks a source tree as much as level 6
    per file for half the CPU. The agent inflates the same stream in the same order.

    Kinds of file (by suffix) are learnt over their first 256 KiB with a cheap level-1 probe of
    each file: a kind whose data did not shrink by a tenth is not tried again (a tree of random
    or already-compressed ``.npy``, ``.pt`` or images costs a few milliseconds of probes), and one
    that did goes to the stream without probes. Files over 1 MiB always go raw (checkpoints,
    datasets, archives: rarely worth it).
    """

    MIN_SIZE = 256  # below this the attempt is not worth it
    LEARN_BYTES = 256 << 10
    WORTH = 0.9
    LEVEL = 4

    def __init__(self) -> None:
        self._tried: dict[str, list[int]] = {}  # suffix -> [bytes probed, bytes they became]
        self._stream = zlib.compressobj(self.LEVEL)

    def pack(self, rel: str, data: bytes) -> bytes | None:
        """``data`` as the stream's next piece when it is worth compressing; else None.

        What this returns must reach the agent, in order, as a ``zs`` put: the stream's state
        includes it.
        """
        if len(data) < self.MIN_SIZE:
            return None
        name = rel.rpartition("/")[2]
        suffix = name.rpartition(".")[2].lower() if "." in name else ""
        seen = self._tried.setdefault(suffix, [0, 0])
        if seen[0] >= self.LEARN_BYTES:
            if seen[1] > self.WORTH * seen[0]:
                return None
        else:
            probe = len(zlib.compress(data, 1))
            seen[0] += len(data)
            seen[1] += min(probe, len(data))
            if probe >= self.WORTH * len(data):
                return None
        return self._stream.compress(data) + self._stream.flush(zlib.Z_SYNC_FLUSH)
