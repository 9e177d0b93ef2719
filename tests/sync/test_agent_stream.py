"""The agent's ``zs`` puts: one deflate stream per session, kept in step across failed puts.

The agent runs as on the VM (``python3 -I -S`` with its source, frames on stdin); the frames come
from the client's own ``Packer``, so both ends of the stream are the real code.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from gcptui.remote.sync.agent_client import AGENT_SOURCE, CHUNK_ABORT, CHUNK_END, Packer

TEXT = "".join(f"def f{i}(x):\n    return x * {i}  # a comment\n" for i in range(200)).encode()


def frame(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">I", len(raw)) + raw + data


def put(rel: str, data: bytes, packer: Packer | None) -> bytes:
    header = {"op": "put", "p": rel, "s": len(data), "m": 0o644, "t": 1_700_000_000_000_000_000}
    packed = packer.pack(rel, data) if packer is not None else None
    assert packer is None or packed is not None, "the test's data should compress"
    if packed is not None:
        header["zs"] = len(packed)
        return frame(header, packed)
    return frame(header, data)


def run_agent(tmp_path: Path, frames: bytes) -> list[dict]:
    """Feed ``frames`` to a real agent (HOME under tmp_path); its replies, decoded."""
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")}
    (tmp_path / "home").mkdir(exist_ok=True)
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", AGENT_SOURCE], input=frames, env=env,
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    replies = []
    while out:
        (size,) = struct.unpack(">I", out[:4])
        replies.append(json.loads(out[4 : 4 + size]))
        out = out[4 + size :]
    return replies


def results(replies: list[dict]) -> dict[str, str | None]:
    return {r[1]: r[3] for r in replies[-1]["results"]}


def test_streamed_files_land_exact_and_a_failed_put_keeps_the_stream_in_step(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "blocked").mkdir(parents=True)
    (dest / "blocked" / "mine.py").mkdir()  # the VM's own directory where a file should land
    packer = Packer()
    bodies = {f"src/m{i}.py": TEXT + str(i).encode() for i in range(5)}
    frames = frame({"op": "init", "dest": str(dest)}) + frame({"op": "mkdir", "p": "src", "m": 0o755})
    names = ["src/m0.py", "src/m1.py", "blocked/mine.py", "src/m2.py", "src/m3.py", "src/m4.py"]
    bodies["blocked/mine.py"] = TEXT + b"blocked"
    for rel in names:
        frames += put(rel, bodies[rel], packer)
    replies = run_agent(tmp_path, frames + frame({"op": "flush", "id": 1}))
    outcome = results(replies)
    assert outcome["blocked/mine.py"] is not None  # refused: not sync's to replace
    assert (dest / "blocked" / "mine.py").is_dir()
    for rel in names:
        if rel != "blocked/mine.py":
            assert outcome[rel] is None, outcome[rel]
            assert (dest / rel).read_bytes() == bodies[rel]  # later files inflated in step


def test_a_broken_stream_fails_later_streamed_puts_in_frame_and_raw_puts_still_land(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    packer = Packer()
    good = put("a.py", TEXT + b"a", packer)
    bad_data = b"\xff" * 300  # not deflate data: the stream cannot go on
    bad = frame({"op": "put", "p": "b.py", "s": 1000, "m": 0o644, "t": 0, "zs": len(bad_data)}, bad_data)
    bomb = zlib.compressobj(4)
    big = bomb.compress(b"\0" * 100_000) + bomb.flush(zlib.Z_SYNC_FLUSH)  # inflates past its size
    frames = frame({"op": "init", "dest": str(dest)}) + good + bad
    frames += put("c.py", TEXT + b"c", packer) + put("d.py", TEXT + b"d", None)
    replies = run_agent(tmp_path, frames + frame({"op": "flush", "id": 1}))
    outcome = results(replies)
    assert outcome["a.py"] is None and (dest / "a.py").read_bytes() == TEXT + b"a"
    assert outcome["b.py"] is not None and not (dest / "b.py").exists()
    assert "compressed stream broke at b.py" in str(outcome["c.py"]) and not (dest / "c.py").exists()
    assert outcome["d.py"] is None and (dest / "d.py").read_bytes() == TEXT + b"d"
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]  # no temp file left behind

    # A piece that inflates past the size its header announced is cut off there, nothing lands.
    frames = frame({"op": "init", "dest": str(dest)})
    frames += frame({"op": "put", "p": "e.py", "s": 10, "m": 0o644, "t": 0, "zs": len(big)}, big)
    replies = run_agent(tmp_path, frames + frame({"op": "flush", "id": 1}))
    assert "inflates past 10 bytes" in str(results(replies)["e.py"])
    assert not (dest / "e.py").exists()


def chunked(rel: str, pieces: list[bytes], end: bytes, size: int | None = None) -> bytes:
    """A ``k`` put: each piece after its length, then ``end`` (CHUNK_END or CHUNK_ABORT)."""
    total = sum(map(len, pieces)) if size is None else size
    header = {"op": "put", "p": rel, "s": total, "m": 0o644, "t": 1_700_000_000_000_000_000, "k": 1}
    return frame(header, b"".join(struct.pack(">I", len(p)) + p for p in pieces) + end)


def test_a_chunked_put_lands_only_when_committed_and_an_abort_stays_in_frame(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "kept.bin").parent.mkdir(parents=True)
    (dest / "kept.bin").write_bytes(b"old")
    frames = frame({"op": "init", "dest": str(dest)})
    frames += chunked("kept.bin", [b"A" * 1000, b"B" * 500], CHUNK_ABORT, size=3000)  # changed midway
    frames += chunked("short.bin", [b"C" * 10], CHUNK_END, size=20)  # committed short: refused
    frames += chunked("big.bin", [b"D" * 70_000, b"E" * 5], CHUNK_END)
    replies = run_agent(tmp_path, frames + frame({"op": "flush", "id": 1}))
    outcome = results(replies)
    assert "changed while it was read" in (outcome["kept.bin"] or "")
    assert "held 10 of 20 bytes" in (outcome["short.bin"] or "")
    assert outcome["big.bin"] is None
    assert (dest / "kept.bin").read_bytes() == b"old"  # never replaced by a torn copy
    assert not (dest / "short.bin").exists()
    assert (dest / "big.bin").read_bytes() == b"D" * 70_000 + b"E" * 5
    assert sorted(p.name for p in dest.iterdir()) == ["big.bin", "kept.bin"]  # no temp left behind


def test_own_records_a_path_only_while_it_is_as_listed(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "same.py").write_text("x")
    (dest / "moved.py").write_text("rewritten by the VM after the listing")
    same, moved = (dest / "same.py").stat(), (dest / "moved.py").stat()
    frames = frame({"op": "init", "dest": str(dest)})
    frames += frame({"op": "own", "p": "same.py", "x": ["f", same.st_size, same.st_mtime_ns, ""]})
    frames += frame({"op": "own", "p": "moved.py", "x": ["f", 1, moved.st_mtime_ns - 10**9, ""]})  # as listed
    replies = run_agent(tmp_path, frames + frame({"op": "flush", "id": 1}) + frame({"op": "scan"}))
    outcome = results(replies[:-1])
    assert outcome["same.py"] is None
    assert "changed on the VM since it was listed" in (outcome["moved.py"] or "")
    assert set(replies[-1]["ledger"]) == {"same.py"}  # never adopted, so never deleted later


@pytest.mark.parametrize("chunked", [True, False])
def test_input_ending_mid_file_leaves_no_temp_file(tmp_path: Path, chunked: bool) -> None:
    """The connection dropped mid-put: the agent exits on end of input and its temp file goes with it."""
    dest = tmp_path / "dest"
    dest.mkdir()
    header = {"op": "put", "p": "big.bin", "s": 3000, "m": 0o644, "t": 1_700_000_000_000_000_000}
    if chunked:
        body = frame({**header, "k": 1}, struct.pack(">I", 1000) + b"A" * 1000)
    else:
        body = frame(header, b"A" * 1000)
    run_agent(tmp_path, frame({"op": "init", "dest": str(dest)}) + body)
    assert list(dest.iterdir()) == []
