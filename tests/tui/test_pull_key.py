"""The pull key (p): a selected machine's run directory copied into ./pulled/NAME with `gcptui pull`'s
code, over SFTP to a real OpenSSH sshd; the run directory read from the job's checkpoint events, or
asked for (a guess prefilled) when none was reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Input

from gcptui.remote.config import JobConfig, parse_config
from gcptui.remote.telemetry.progress import Checkpoint, Progress
from gcptui.tui.app import GcptuiApp
from gcptui.tui.dialogs.ask import AskScreen
from gcptui.tui.fleet.pull import PullProgress, guess_run_dir, known_run_dir, local_dir_for
from tests.cli.test_pull import config_for, run_tree, tree
from tests.helpers.sshd import Sshd
from tests.tui.test_fleet_hosts import wait_rows


def test_the_run_directory_is_the_checkpoints_folders_parent() -> None:
    def at(path: str) -> Progress:
        return Progress(last_checkpoint=Checkpoint(100, path))

    assert known_run_dir(at("runs/demo/checkpoints/step-000000100.pt")) == "runs/demo"
    assert known_run_dir(at("/home/u/project/runs/x/checkpoints/s.pt")) == "/home/u/project/runs/x"
    assert known_run_dir(at("ckpt/model-100.pt")) is None  # another layout: not known, ask
    assert known_run_dir(at("checkpoints/s.pt")) is None  # the job's folder itself: ask
    assert known_run_dir(Progress()) is None and known_run_dir(None) is None
    assert guess_run_dir(JobConfig()) == "runs"
    assert guess_run_dir(JobConfig(env={"GCPTUI_METRICS": "runs/exp1/metrics.jsonl"})) == "runs/exp1"
    # A checkpoint in another layout: its folder is the guess, not the whole `runs`.
    assert guess_run_dir(JobConfig(), at("runs/exp2/model-100.pt")) == "runs/exp2"
    assert local_dir_for("box") == Path("pulled/box")


def test_progress_notifications_are_rate_limited() -> None:
    said: list[str] = []
    meter = PullProgress(said.append, "box:runs/demo", every=0.0)
    meter.planned(3, 2_000_000)
    meter.progress(1_000_000)
    assert said == ["box:runs/demo: 50% of 3 files (1.0 MB of 2.0 MB)"]  # the plan alone says nothing
    quiet = PullProgress(said.append, "x", every=3600.0)
    quiet.planned(1, 10)
    quiet.progress(5)
    assert len(said) == 1  # a pull quicker than `every`: the result line is the only notification


def notifications(app: GcptuiApp) -> list[str]:
    return [n.message for n in app._notifications]


async def wait_for(pilot, condition, what: str, tries: int = 500) -> None:  # type: ignore[no-untyped-def]
    for _ in range(tries):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def remote_run(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    remote = tmp_path / "vm" / "runs" / "demo"  # sshd runs on this machine: its files are the VM's
    files = run_tree(remote)
    event = {
        "event": "checkpoint",
        "step": 200,
        "path": f"{remote}/checkpoints/step-000000200.pt",
        "time": 1.0,
    }
    files["metrics.jsonl"] += (json.dumps(event) + "\n").encode()
    (remote / "metrics.jsonl").write_bytes(files["metrics.jsonl"])
    return remote, files


async def test_p_pulls_the_run_directory_the_checkpoints_name(
    sshd: Sshd, tmp_path: Path, remote_run: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, files = remote_run
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    monkeypatch.chdir(laptop)
    extra = f'[job]\nenv = {{ GCPTUI_METRICS = "{remote}/metrics.jsonl" }}\n'
    config = parse_config(Path(config_for(sshd, tmp_path, extra)).read_text(), tmp_path / "gcptui.toml")
    app = GcptuiApp(config)
    async with app.run_test(size=(130, 30)) as pilot:
        await wait_rows(pilot, app.fleet_screen, 1)
        # The progress monitor reads the job's metrics over SSH: the checkpoint event names the run dir.
        await wait_for(pilot, lambda: "box" in app.live and known_run_dir(app.live["box"].progress) == str(remote),
                       "the checkpoint event")  # fmt: skip
        await pilot.press("p")
        # The path is the VM's word: asked first, prefilled with it (a VM never picks what is pulled).
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen), "the question")
        assert app.screen.query_one(Input).value == str(remote)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("6 copied" in m for m in notifications(app)), "the result line")
        assert tree(laptop / "pulled/box/demo") == files
        result = next(m for m in notifications(app) if "6 copied" in m)
        assert result.startswith(f"box:{remote} → pulled/box/demo: 6 copied")
        assert len([n for n in app._notifications if n.title == "Pull"]) == 1, notifications(app)
        await pilot.press("p")  # pulled before: again at once
        await wait_for(
            pilot, lambda: any("6 already complete" in m for m in notifications(app)), "the 2nd pull"
        )
        assert not isinstance(app.screen, AskScreen)


async def test_p_asks_for_the_folder_when_no_checkpoint_names_it(
    sshd: Sshd, tmp_path: Path, remote_run: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, files = remote_run
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    monkeypatch.chdir(laptop)
    config = parse_config(Path(config_for(sshd, tmp_path)).read_text(), tmp_path / "gcptui.toml")
    app = GcptuiApp(config)
    async with app.run_test(size=(130, 30)) as pilot:
        await wait_rows(pilot, app.fleet_screen, 1)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen), "the question")
        field = app.screen.query_one(Input)
        assert field.value == "runs"  # the best guess, prefilled
        box = app.screen.query_one("#confirm")
        assert box.region.y > 1 and box.region.x > 1  # centred, not over the header at the top left
        field.value = str(remote)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("6 copied" in m for m in notifications(app)), "the result line")
        assert tree(laptop / "pulled/box/demo") == files

        await pilot.press("p")  # Esc cancels: nothing more is copied
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen), "the question")
        await pilot.press("escape")
        assert not isinstance(app.screen, AskScreen)
