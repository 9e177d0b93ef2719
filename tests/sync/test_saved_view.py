"""The VM's view kept on local disk between sessions (remote/sync/saved_view.py): a file that is
not exactly what it claims to be is never used."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gcptui.remote.sync import saved_view
from gcptui.remote.sync.agent_client import view_digest
from gcptui.remote.sync.manifest import Entry

ENTRIES = {
    "a.py": Entry("f", 12, 1_700_000_000_123_456_789, 0o644),
    "d": Entry("d", mode=0o755),
    "d/ln": Entry("l", target="../a.py"),
    "é/\udcff.txt": Entry("f", 0, 5, 0o600),  # a name that is not UTF-8 on the VM
}
LEDGER = {"a.py": ["f", 12, 1_700_000_000_123_456_789], "d": ["d", 0, 0]}


def test_a_saved_view_loads_back_with_its_digest(tmp_path: Path) -> None:
    digest = saved_view.save("k", ENTRIES, LEDGER, tmp_path)
    assert digest == view_digest(ENTRIES, LEDGER)
    loaded = saved_view.load("k", tmp_path)
    assert loaded is not None
    assert (loaded.digest, loaded.entries, loaded.ledger) == (digest, ENTRIES, LEDGER)
    assert [p.name for p in tmp_path.iterdir()] == ["k"]  # no temp file left beside it


def test_peek_reads_the_claimed_digest_alone(tmp_path: Path) -> None:
    """What a new session offers at once; the rest is read and checked meanwhile (load)."""
    digest = saved_view.save("k", ENTRIES, LEDGER, tmp_path)
    assert saved_view.peek("k", tmp_path) == digest
    whole = (tmp_path / "k").read_bytes()
    (tmp_path / "cut").write_bytes(whole[:-20])  # a damaged body still claims its digest ...
    assert saved_view.peek("cut", tmp_path) == digest
    assert saved_view.load("cut", tmp_path) is None  # ... which load refuses to stand behind
    head = len(saved_view.MAGIC)
    for name, data in {
        "absent-digest": saved_view.MAGIC + b"\n",
        "not hex": saved_view.MAGIC + b"z" * 64 + b"\n",
        "foreign": b"something else entirely" * 4,
        "short": whole[: head + 10],
    }.items():
        (tmp_path / name).write_bytes(data)
        assert saved_view.peek(name, tmp_path) is None, name
    assert saved_view.peek("absent", tmp_path) is None


def test_a_missing_damaged_or_foreign_file_is_no_view(tmp_path: Path) -> None:
    assert saved_view.load("absent", tmp_path) is None
    saved_view.save("k", ENTRIES, LEDGER, tmp_path)
    whole = (tmp_path / "k").read_bytes()
    cases = {
        "truncated": whole[: len(whole) - 7],
        "empty": b"",
        "another format": b"gcptui-sync-view 2\n" + whole[len(saved_view.MAGIC) :],
        "bit flipped": whole[:-3] + bytes([whole[-3] ^ 1]) + whole[-2:],
        "garbage": b"\x00" * 200,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert saved_view.load(name, tmp_path) is None, name


def test_a_view_whose_content_disagrees_with_its_digest_is_no_view(tmp_path: Path) -> None:
    """A file that decodes but is not the view its header names (another version's idea of an
    entry, an edit by hand): offering its digest could make the VM confirm a view we do not hold."""
    saved_view.save("k", ENTRIES, LEDGER, tmp_path)
    other = saved_view.save("other", {**ENTRIES, "b.py": Entry("f", 1, 1, 0o644)}, LEDGER, tmp_path)
    whole = (tmp_path / "k").read_bytes()
    head = len(saved_view.MAGIC)
    (tmp_path / "k").write_bytes(whole[:head] + other.encode() + whole[head + 64 :])
    assert saved_view.load("k", tmp_path) is None


def test_keys_tell_vms_users_and_dests_apart() -> None:
    base = saved_view.view_key("SHA256:abc", "me", "~/project")
    assert base == saved_view.view_key("SHA256:abc", "me", "~/project")
    others = {
        saved_view.view_key("SHA256:abd", "me", "~/project"),
        saved_view.view_key("SHA256:abc", "you", "~/project"),
        saved_view.view_key("SHA256:abc", "me", "~/project2"),
    }
    assert base not in others and len(others) == 3


def test_saving_drops_views_not_written_for_a_month(tmp_path: Path) -> None:
    """Deleted VMs and each demo run's fresh VMs leave views behind: they must not pile up."""
    saved_view.save("old", ENTRIES, LEDGER, tmp_path)
    saved_view.save("recent", ENTRIES, LEDGER, tmp_path)
    (tmp_path / ".old.tmp123").write_bytes(b"an interrupted save")
    month_ago = time.time() - saved_view.KEEP_SECONDS - 60
    for name in ("old", ".old.tmp123"):
        os.utime(tmp_path / name, (month_ago, month_ago))
    saved_view.save("new", ENTRIES, LEDGER, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "recent"]
