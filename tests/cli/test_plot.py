"""`gcptui plot`: a machine's metrics file read over SSH (OpenSSH sshd) and drawn as the curves screen
draws it: plain text in a pipe, an SVG with --svg; --png and an unknown metric are one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.sshd import Sshd

ROOT = Path(__file__).resolve().parents[2]


def gcptui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gcptui.tui", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))  # fmt: skip


def _setup(sshd: Sshd, tmp_path: Path) -> str:
    lines = [{"step": s, "total_steps": 60, "loss": 2.0 / s, "time": 1000.0 + s} for s in range(1, 41)]
    lines += [
        {"event": "preempted", "step": 40, "time": 1041.0},
        {"event": "resumed", "step": 30, "time": 1100.0},
    ]
    lines += [{"step": s, "loss": 2.1 / s, "time": 1100.0 + s} for s in range(31, 61)]
    metrics = sshd.home / ".gcptui" / "job" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json\n")
    config = tmp_path / "gcptui.toml"
    config.write_text(
        f'[ssh]\nkey = "{sshd.client_key}"\nknown_hosts = "{sshd.known_hosts}"\nuser = "{sshd.user}"\n'
        f'[[hosts]]\nname = "box"\naddress = "{sshd.host}"\nport = {sshd.port}\n'
    )
    return str(config)


def test_plot_draws_the_loss_as_plain_text_in_a_pipe_and_as_an_svg(sshd: Sshd, tmp_path: Path) -> None:
    config = _setup(sshd, tmp_path)
    result = gcptui("plot", "box", "--config", config)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip("\n").split("\n")
    assert lines[0] == "loss, by step"
    assert "\x1b" not in result.stdout and all(len(line) <= 100 for line in lines)
    assert lines[-1].split("  ") == ["━ box", "┊ preempted", "┊ resumed"]
    assert lines[-2].split() == ["1", "60"]  # the resumed run's steps continue the curve to 60
    assert any(chr(c) in result.stdout for c in range(0x2801, 0x2900))  # braille dots drawn

    svg = tmp_path / "out" / "loss.svg"
    svg.parent.mkdir()
    written = gcptui("plot", "box", "--svg", str(svg), "--config", config)
    assert written.returncode == 0, written.stderr
    text = svg.read_text()
    assert text.startswith("<svg") and "gcptui&#160;plot&#160;box" in text and "preempted" in text


def test_plot_refuses_png_and_a_metric_nobody_reports_in_one_line(sshd: Sshd, tmp_path: Path) -> None:
    config = _setup(sshd, tmp_path)
    png = gcptui("plot", "box", "--png", str(tmp_path / "x.png"), "--config", config)
    assert png.returncode == 2 and "--svg" in png.stderr and len(png.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.png").exists()
    other = gcptui("plot", "box", "--metric", "accuracy", "--config", config)
    assert other.returncode == 2, other.stderr
    assert "'accuracy'" in other.stderr and "the metrics reported are loss" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1
