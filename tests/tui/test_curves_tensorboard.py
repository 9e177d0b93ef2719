"""TensorBoard event files in a run directory (issue 53): written by torch's ``SummaryWriter`` and
Lightning's ``TensorBoardLogger``, read with TensorBoard's own reader over an exec channel (real
``find``/``tail``/``base64`` processes) and from a local folder, into the curves' history: the
scalars' steps, values and times as written, nothing else, tailed as the writer adds to them; a
damaged file, a hostile tag name and the byte caps said in one line each, never a crash."""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Static

from gcptui.remote.telemetry import tb_events
from gcptui.remote.telemetry.history import MetricHistory
from gcptui.remote.telemetry.tb_events import EventMirror, LocalEvents, RemoteEvents, refresh_events
from gcptui.tui.curves.screen import CurvesScreen
from tests.helpers.local_exec import LocalChannel


@pytest.fixture
async def channel() -> AsyncIterator[LocalChannel]:
    channel = LocalChannel()
    yield channel
    await channel.aclose()


@pytest.fixture
def mirror() -> Iterator[EventMirror]:
    mirror = EventMirror()
    yield mirror
    mirror.close()


def _summary_writer(run_dir: Path, steps: range, *, scale: float = 1.0) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "runs" / "exp1"))
    for step in steps:
        writer.add_scalar("train/loss", scale / (1 + step), step, walltime=1_000.0 + step)
    writer.add_text("notes", "not a scalar", 0)
    writer.add_histogram("weights", np.arange(10.0), 0)
    writer.close()


async def test_summary_writer_and_lightning_scalars_are_read_over_the_channel_as_written(
    tmp_path: Path, channel: LocalChannel, mirror: EventMirror
) -> None:
    from lightning.pytorch.loggers import TensorBoardLogger

    run_dir = tmp_path / "project"
    _summary_writer(run_dir, range(0, 300))
    logger = TensorBoardLogger(save_dir=str(run_dir), name="lightning_logs")
    for step in range(1, 6):
        logger.log_metrics({"val_acc": step / 10}, step=step)
    logger.finalize("success")
    (run_dir / ".venv" / "x").mkdir(parents=True)  # skipped folders are not searched
    (run_dir / ".venv" / "x" / "events.out.tfevents.1.h.1.0").write_bytes(b"")

    history = MetricHistory()
    said = await refresh_events(RemoteEvents(channel, str(run_dir)), mirror, history)
    assert said.files == 2 and said.changed and said.warnings == []
    loss = history.series["tb:runs/exp1:train/loss"]  # two folders hold events: each is named
    assert loss.steps == list(range(300))
    assert loss.values == pytest.approx([1 / (1 + s) for s in range(300)], rel=1e-6)  # float32
    assert loss.times == [1_000.0 + s for s in range(300)]
    assert history.series["tb:lightning_logs/version_0:val_acc"].steps == [1, 2, 3, 4, 5]
    assert not any("notes" in name or "weights" in name for name in history.series)  # scalars only

    again = await refresh_events(RemoteEvents(channel, str(run_dir)), mirror, history)
    assert not again.changed  # nothing added, nothing read twice


async def test_a_live_writer_is_tailed_and_a_resume_replaces_the_steps_it_writes_again(
    tmp_path: Path, mirror: EventMirror
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs" / "live"))
    for step in range(50):
        writer.add_scalar("loss", 1.0, step)
    writer.flush()
    history = MetricHistory()
    source = LocalEvents(tmp_path)
    await refresh_events(source, mirror, history)
    assert history.series["tb:loss"].steps == list(range(50))
    fetched = mirror.total

    for step in range(40, 80):  # resumed from the checkpoint of step 40: those steps again
        writer.add_scalar("loss", 2.0, step)
    writer.close()
    said = await refresh_events(source, mirror, history)
    loss = history.series["tb:loss"]
    assert said.changed and loss.steps == list(range(80))  # continuous, no step twice
    assert loss.values[39] == 1.0 and loss.values[40:] == [2.0] * 40
    assert mirror.total > fetched and mirror.total == sum(c.size for c in mirror.copies.values())


async def test_damaged_files_and_hostile_tags_give_what_is_readable_and_one_line_each(
    tmp_path: Path, channel: LocalChannel, mirror: EventMirror
) -> None:
    _summary_writer(tmp_path, range(100))
    (good,) = (tmp_path / "runs" / "exp1").glob("events.out.tfevents.*")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "events.out.tfevents.9.h.1.0").write_bytes(bytes(range(256)) * 64)
    from torch.utils.tensorboard import SummaryWriter

    hostile = SummaryWriter(str(tmp_path / "runs" / "exp1"), filename_suffix=".2")
    hostile.add_scalar("evil\x1b]52;c;SGVsbG8=\x07\x1b[2J\n/loss", 3.0, 1)
    hostile.close()

    history = MetricHistory()
    said = await refresh_events(RemoteEvents(channel, str(tmp_path)), mirror, history)
    assert len(said.warnings) == 1 and said.warnings[0].startswith(
        "junk/events.out.tfevents.9.h.1.0: left out"
    )
    assert "\n" not in said.warnings[0]
    assert history.series["tb:runs/exp1:train/loss"].steps == list(range(100))
    (evil,) = [name for name in history.series if "evil" in name]
    assert evil.isprintable() and "\x1b" not in evil

    # A record damaged half-way: what comes before it is kept, the run goes on.
    data = bytearray(good.read_bytes())
    data[2000] ^= 0xFF  # within the scalars (about 50 bytes each), written first
    good.write_bytes(bytes(data))
    other = EventMirror()
    try:
        damaged = MetricHistory()
        await refresh_events(LocalEvents(tmp_path), other, damaged)
        steps = damaged.series["tb:runs/exp1:train/loss"].steps
        assert 10 < len(steps) < 100 and steps == list(range(len(steps)))
    finally:
        other.close()


async def test_reads_are_capped_and_said(
    tmp_path: Path, channel: LocalChannel, mirror: EventMirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    _summary_writer(tmp_path, range(2000))
    (file,) = (tmp_path / "runs" / "exp1").glob("events.out.tfevents.*")
    monkeypatch.setattr(tb_events, "MAX_FILE_BYTES", 20_000)
    history = MetricHistory()
    said = await refresh_events(RemoteEvents(channel, str(tmp_path)), mirror, history)
    assert file.stat().st_size > 60_000 and mirror.total == 20_000
    assert said.warnings == ["runs/exp1/" + file.name + ": only its first 0 MiB read"]
    steps = history.series["tb:train/loss"].steps
    assert 100 < len(steps) < 2000 and steps == list(range(len(steps)))


async def test_without_tensorboard_the_files_found_say_how_to_install_it(
    tmp_path: Path, mirror: EventMirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    _summary_writer(tmp_path, range(3))
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as where the extra is not installed
    history = MetricHistory()
    said = await refresh_events(LocalEvents(tmp_path), mirror, history)
    assert said.files == 1 and said.warnings == [tb_events.INSTALL_HINT] and not history.series
    assert "gcptui[tensorboard]" in tb_events.INSTALL_HINT


class _Screen(App[None]):
    def __init__(self, channel: LocalChannel, run_dir: Path) -> None:
        super().__init__()
        self.curves = CurvesScreen([("box", channel)], str(run_dir / "metrics.jsonl"), run_dir=str(run_dir))

    def on_mount(self) -> None:
        self.push_screen(self.curves)


async def _until(pilot: Pilot[None], predicate: Callable[[], object]) -> None:
    for _ in range(1200):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met in time")


async def test_the_curves_screen_plots_the_event_files_beside_the_metrics_file(
    tmp_path: Path, channel: LocalChannel
) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n')
    _summary_writer(tmp_path, range(50))
    app = _Screen(channel, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        runs = app.curves.runs
        await _until(pilot, lambda: "tb:train/loss" in runs["box"].series and "loss" in runs["box"].series)
        assert runs["box"].series["tb:train/loss"].steps == list(range(50))
        await pilot.press("m")  # the next metric: the event files' tag
        plot = str(app.curves.query_one("#curves-plot", Static).render())
        assert plot.startswith("tb:train/loss, by step") and "━ box" in plot


async def test_without_tensorboard_the_screen_says_how_to_install_it(
    tmp_path: Path, channel: LocalChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    _summary_writer(tmp_path, range(3))
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    app = _Screen(channel, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        status = app.curves.query_one("#curves-status", Static)
        await _until(pilot, lambda: "gcptui[tensorboard]" in str(status.render()))
        assert str(status.render()).startswith(tb_events.INSTALL_HINT)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=200), max_size=6), tail=st.binary(max_size=64))
def test_any_bytes_in_an_event_file_give_bounded_points_or_one_line(
    tmp_path: Path, payloads: list[bytes], tail: bytes
) -> None:
    from tensorboard.summary.writer.record_writer import RecordWriter

    framed = io.BytesIO()
    writer = RecordWriter(framed)  # well-framed records (valid CRCs) of arbitrary bytes, then junk
    for payload in payloads:
        writer.write(payload)
    folder = tmp_path / str(abs(hash((tuple(payloads), tail))))
    folder.mkdir()
    (folder / "events.out.tfevents.1.h.1.0").write_bytes(framed.getvalue() + tail)
    mirror = EventMirror()
    try:
        history = MetricHistory()
        said = asyncio.run(refresh_events(LocalEvents(folder), mirror, history))
        assert len(said.warnings) <= 1 and all(line.isprintable() for line in said.warnings)
        assert all(name.isprintable() and len(s.steps) <= 2 * s.cap for name, s in history.series.items())
    finally:
        mirror.close()
