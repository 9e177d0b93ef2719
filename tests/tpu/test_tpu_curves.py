"""Curves of a TPU node (issue 53): each worker's own metrics file is its own curve, labelled
``NODE/wN``, and the TensorBoard event files a worker's job wrote in its run directory are read there
(the emulated workers' own disks, over SSH), drawn by `gcptui plot` as the curves screen draws them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.cli.main import main


def test_plot_draws_each_worker_of_a_tpu_node_and_a_workers_tensorboard_events(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    emulator_thread.add_tpu("tpu-a", accelerator_type="v4-16")  # two worker hosts
    emulator_thread.wait_for_tpu("tpu-a", "READY")
    workers = emulator_thread.tpu("tpu-a").workers
    assert len(workers) == 2
    for rank, worker in enumerate(workers):
        assert worker.disk is not None
        metrics = worker.disk / "home" / ".gcptui" / "job" / "metrics.jsonl"
        metrics.parent.mkdir(parents=True)
        lines = [{"step": s, "loss": (rank + 1) / s, "time": 1000.0 + s} for s in range(1, 51)]
        metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert workers[1].disk is not None
    writer = SummaryWriter(str(workers[1].disk / "home" / "project" / "runs" / "eval"))
    for step in range(100):
        writer.add_scalar("eval/acc", step / 100, step)
    writer.close()
    config = str(emulator_thread.write_config(tmp_path / "gcptui.toml"))

    assert main(["plot", "tpu-a", "--config", config]) == 0
    out = capsys.readouterr().out.rstrip("\n").split("\n")
    assert out[0] == "loss, by step" and out[-1].split("  ") == ["━ tpu-a/w0", "━ tpu-a/w1"]
    assert out[1].split()[0] == "2" and out[-3].split()[0] == "0.02"  # w1's 2/1 .. w0's 1/50
    assert out[-2].split() == ["1", "50"]

    assert main(["plot", "tpu-a/w1", "--metric", "tb:eval/acc", "--config", config]) == 0
    out = capsys.readouterr().out.rstrip("\n").split("\n")
    assert out[0] == "tb:eval/acc, by step" and out[-1] == "━ tpu-a/w1"
    assert out[1].split()[0] == "0.99" and out[-3].split()[0] == "0" and out[-2].split() == ["0", "99"]
