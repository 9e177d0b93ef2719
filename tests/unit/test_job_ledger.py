"""The laptop's memory of job states, which finds VMs stopped while unwatched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gcptui.remote.keepalive.job_ledger import JobLedger


def test_a_job_seen_running_after_the_last_start_of_the_same_vm_counts(tmp_path: Path) -> None:
    path = tmp_path / "state" / "jobs-seen.json"
    start = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    JobLedger(path).record("vm", "111", "running", at=start + timedelta(minutes=5))
    ledger = JobLedger(path)  # read back from the file
    assert ledger.ran_since_start("vm", "111", start.isoformat())
    assert not ledger.ran_since_start("vm", "222", start.isoformat()), "a recreated VM is another VM"
    assert not ledger.ran_since_start("vm", "111", (start + timedelta(hours=1)).isoformat()), (
        "seen in an earlier run"
    )
    assert not ledger.ran_since_start("other", "111", None)


def test_a_job_seen_ending_does_not_count_and_a_damaged_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "jobs-seen.json"
    ledger = JobLedger(path)
    ledger.record("vm", "111", "running")
    ledger.record("vm", "111", "exited")
    assert not JobLedger(path).ran_since_start("vm", "111", None)
    path.write_text("{not json")
    assert not JobLedger(path).ran_since_start("vm", "111", None)
    assert not list(tmp_path.glob(".jobs-seen.*")), "no temporary file left behind"
