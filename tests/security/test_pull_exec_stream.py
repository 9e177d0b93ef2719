"""A hostile machine's pull reader (the stream a pull over a plain exec channel reads) cannot write
outside the pull folder, past a file's listed size, or make the laptop buffer an unbounded frame:
names are refused unless plain, sizes and frames are capped, and the pull stops at the first lie.

The machine is a loopback sshd whose exec runs the script below instead of gcptui's reader."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.config import SshConfig
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget
from gcptui.remote.transfer.exec_pull import CHUNK
from gcptui.remote.transfer.pull import PullError, pull
from tests.helpers.plain_channel import PlainChannel
from tests.helpers.sshd import Sshd

# Answers the reader's two requests with LISTING, then per file asked for: ok and the bytes of
# SENDS[relative] (default: as many as asked) in one frame, then the end frame.
HOSTILE = """
import json, os, struct, sys
left = SOURCE_BYTES  # the real reader's source comes first on stdin: skipped
while left:
    left -= len(os.read(0, left))
out = sys.stdout.buffer
def frame(b):
    out.write(struct.pack('>I', len(b)) + b)
LISTING = json.loads(%(listing)r)
SENDS = json.loads(%(sends)r)
RAW = %(raw)r
for line in sys.stdin.buffer:
    request = json.loads(line)
    if request['op'] == 'list':
        if RAW:
            out.write(bytes.fromhex(RAW))
        else:
            frame(json.dumps(LISTING).encode())
    else:
        for rel, offset, n in request['files']:
            frame(b'{"ok": 1}')
            frame(b'x' * SENDS.get(rel, n))
            frame(b'')
    out.flush()
"""


@pytest.fixture
async def hostile(sshd: Sshd, tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
    pool = SshPool(SshConfig())

    async def run(listing: dict, sends: dict[str, int] | None = None, raw: str = "") -> object:
        script = HOSTILE % {"listing": json.dumps(listing), "sends": json.dumps(sends or {}), "raw": raw}

        def instead(asked: str) -> str:
            size = re.search(r"n=(\d+);", asked)
            assert size is not None, "the reader's source goes over stdin"
            return f"exec python3 -c {shlex.quote(script.replace('SOURCE_BYTES', size[1]))}"

        channel = PlainChannel(SshExecChannel(pool.getter(target), lambda: "box"), instead=instead)
        return await pull(channel, "runs/demo", tmp_path / "pulled" / "box")

    try:
        yield run
    finally:
        await pool.close()


def written(root: Path) -> dict[str, int]:
    """Every file under ``root`` (the whole test folder but the sshd's), with its size."""
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and "sshd" not in p.relative_to(root).parts and "vm" not in p.relative_to(root).parts
    }


async def test_names_that_leave_the_folder_are_refused_and_only_plain_ones_land(
    hostile: Callable[..., object], tmp_path: Path
) -> None:
    before = written(tmp_path)
    escapes = ["../escape", "../../escape", "/etc/escape", "a/../../escape", "a//b", ".", "..",
               "x\x1b]0;pwned\x07", "dir/\x1b[31mred", "a\\..\\b", "n" * 300]  # fmt: skip
    listing = {"kind": "dir", "files": [[name, 3, 0] for name in escapes]
               + [["ok.bin", 3, 0], ["deep/ok2.bin", 2, 0], ["bad-size", -1, 0], ["huge", 2**60, 0],
                  [7, 1, 0], ["short"], "junk", ["flag", True, 0]]}  # fmt: skip
    result = await hostile(listing)
    landed = {k: v for k, v in written(tmp_path).items() if k not in before}
    assert landed == {"pulled/box/demo/ok.bin": 3, "pulled/box/demo/deep/ok2.bin": 2}
    assert sorted(result.copied) == ["deep/ok2.bin", "ok.bin"]  # type: ignore[attr-defined]
    odd = result.odd  # type: ignore[attr-defined]
    assert "'..'" in odd and "'a/..'" in odd and "6 malformed entries" in odd  # each refused prefix once
    assert all(line.isprintable() for line in odd)  # escaped, never the machine's raw text


async def test_bytes_past_a_files_listed_size_are_refused_before_they_are_written(
    hostile: Callable[..., object], tmp_path: Path
) -> None:
    listing = {"kind": "dir", "files": [["a.bin", 10, 0], ["b.bin", 5, 0]]}
    with pytest.raises(PullError, match=r"sent more of .*b\.bin than the 5 bytes it listed") as caught:
        await hostile(listing, sends={"b.bin": 5000})
    assert "\n" not in str(caught.value)
    box = tmp_path / "pulled" / "box" / "demo"
    assert (box / "a.bin").stat().st_size == 10
    assert not (box / "b.bin").exists()
    assert all(p.stat().st_size <= 5 for p in box.glob(".b.bin*"))  # the part holds nothing past the cap


async def test_a_frame_past_its_cap_is_refused_unread(hostile: Callable[..., object]) -> None:
    # A listing frame announcing 4 GiB, then nothing: refused on its length alone.
    with pytest.raises(PullError, match=r"4294967295-byte listing"):
        await hostile({}, raw="ffffffff")
    # A chunk of file data bigger than the reader's chunks.
    with pytest.raises(PullError, match=rf"{CHUNK + 1}-byte chunk of file data"):
        await hostile({"kind": "dir", "files": [["a.bin", 2 * CHUNK, 0]]}, sends={"a.bin": CHUNK + 1})


async def test_a_garbled_listing_is_one_line(hostile: Callable[..., object]) -> None:
    with pytest.raises(PullError, match="garbled listing"):
        await hostile({"kind": "dir", "files": "everything"})
    with pytest.raises(PullError, match="garbled listing"):
        await hostile({}, raw="00000003" + b"[1,".hex())
