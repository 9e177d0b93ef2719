"""`gcptui plot`: a machine's metrics file read over SSH (OpenSSH sshd) and drawn as the curves screen
draws it: plain text in a pipe, an SVG with --svg, a PNG of the same cells with --png; the
TensorBoard event files of the run directory (over SSH) and of a pulled folder; an unknown metric
and a missing extra are one line, exit 2."""

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
    lines: list[dict[str, object]] = [
        {"step": s, "total_steps": 60, "loss": 2.0 / s, "time": 1000.0 + s} for s in range(1, 41)
    ]
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


def test_plot_writes_a_png_of_the_same_cells_and_refuses_a_metric_nobody_reports(
    sshd: Sshd, tmp_path: Path
) -> None:
    from PIL import Image
    from rich.color import Color
    from rich.terminal_theme import SVG_EXPORT_THEME

    config = _setup(sshd, tmp_path)
    png = tmp_path / "loss.png"
    written = gcptui("plot", "box", "--png", str(png), "--config", config)
    assert written.returncode == 0, written.stderr
    image = Image.open(png).convert("RGB")
    assert image.size[0] > 900
    colours = {rgb for _, rgb in image.getcolors(maxcolors=1 << 16) or []}

    def theme(name: str) -> tuple[int, int, int]:
        triplet = Color.parse(name).get_truecolor(SVG_EXPORT_THEME)
        return (triplet.red, triplet.green, triplet.blue)

    assert theme("green") in colours and theme("red") in colours  # the curve and the preemption's mark
    pixels = image.load()
    assert pixels is not None
    curve = [y for x in range(image.size[0]) for y in range(image.size[1]) if pixels[x, y] == theme("green")]
    assert len(curve) > 200  # a line, not a legend swatch alone

    other = gcptui("plot", "box", "--metric", "accuracy", "--config", config)
    assert other.returncode == 2, other.stderr
    assert "'accuracy'" in other.stderr and "the metrics reported are loss" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1


def _without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """gcptui where ``module`` cannot be imported (an extra not installed)."""
    code = f"import sys, runpy; sys.modules[{module!r}] = None; runpy.run_module('gcptui.tui', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))  # fmt: skip


def _events(run_dir: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "runs" / "exp"))
    for step in range(300):
        writer.add_scalar("train/loss", 1 / (1 + step), step)
    writer.close()


def test_plot_reads_tensorboard_events_of_the_run_directory_over_ssh_and_of_a_pulled_folder(
    sshd: Sshd, tmp_path: Path
) -> None:
    config = _setup(sshd, tmp_path)
    _events(sshd.home / "project")  # [sync].dest's default: where the job runs
    remote = gcptui("plot", "box", "--metric", "tb:train/loss", "--config", config)
    assert remote.returncode == 0, remote.stderr
    lines = remote.stdout.rstrip("\n").split("\n")
    assert lines[0] == "tb:train/loss, by step"
    assert lines[1].split()[0] == "1" and lines[-3].split()[0] == "0.00333"  # 1/(1+0) .. 1/(1+299)
    assert lines[-2].split() == ["0", "299"] and lines[-1].startswith("━ box  ┊ preempted")  # the run's marks

    pulled = tmp_path / "pulled"
    _events(pulled)
    local = gcptui("plot", str(pulled))  # no config needed: no machine is named
    assert local.returncode == 0, local.stderr
    assert local.stdout.startswith("tb:train/loss, by step\n")  # the only metric: the default
    assert local.stdout.rstrip("\n").split("\n")[-2].split() == ["0", "299"]

    bare = _without("tensorboard", "plot", str(pulled))
    assert bare.returncode == 2
    assert (
        bare.stderr.splitlines()[0]
        == f"{pulled}: TensorBoard event files found: pip install 'gcptui[tensorboard]' to plot them"
    )
    no_png = _without("PIL", "plot", "box", "--png", str(tmp_path / "x.png"), "--config", config)
    assert no_png.returncode == 2 and "pip install 'gcptui[png]'" in no_png.stderr
    assert len(no_png.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()
