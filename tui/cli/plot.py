"""`gcptui plot NAME... [--metric M] [--svg FILE | --png FILE]`: the curves screen's plot, headless.

Each machine's metrics file is read once over its exec channel (remote/telemetry/history.py), and
the curves of one metric (default: the loss) are drawn with gcptui's one plotting engine
(tui/plots.py): to the terminal (plain text when stdout is no terminal), or as an SVG of the same
rendering (Rich's console export). PNG needs an image library gcptui does not depend on: one line
says so.
"""

from __future__ import annotations

import argparse
import asyncio
import io
from pathlib import Path

from rich.console import Console

from gcptui.remote.aio import within
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.jobs.protocol import metrics_path
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import one_line
from gcptui.remote.services import Services
from gcptui.remote.telemetry.history import MetricHistory
from gcptui.tui.cli.common import with_services
from gcptui.tui.curves.data import View, metrics_of, plot_height, read_history, render

READ_TIMEOUT = 60.0
SVG_WIDTH = 120  # columns of an exported plot: a report's page, whatever the terminal is
SVG_ROWS = 30
PLAIN_WIDTH = 100  # a pipe has no width; Rich would take 80


def run_plot(args: argparse.Namespace) -> int:
    if args.png:
        raise ConfigError(
            "PNG needs an image library gcptui does not install: write an SVG with --svg FILE instead"
        )
    err = Console(stderr=True, highlight=False)

    async def body(services: Services) -> dict[str, MetricHistory]:
        instances = await services.resolve(list(dict.fromkeys(args.name)))
        path = metrics_path(services.config.job, services.config.sync.dest)
        runs = {i.name: MetricHistory() for i in instances}

        async def one(instance: Instance) -> None:
            try:
                await within(
                    READ_TIMEOUT, read_history(services.channel(instance), path, runs[instance.name])
                )
            except (GcptuiError, OSError, TimeoutError) as error:
                err.print(
                    one_line(f"{instance.name}: could not read {path} ({error or type(error).__name__})")
                )

        await asyncio.gather(*(one(i) for i in instances))
        return runs

    runs = with_services(args, body)
    known = metrics_of(runs)
    metric = args.metric or "loss"
    if metric not in known:
        choices = ", ".join(known) if known else "none yet (has the job written progress lines?)"
        raise ConfigError(f"no run reports the metric {metric!r}: the metrics reported are {choices}")
    view = View(metric=metric)
    if args.svg:
        text = render(runs, view, width=SVG_WIDTH, height=plot_height(SVG_ROWS, list(runs), SVG_WIDTH))
        console = Console(record=True, width=SVG_WIDTH, file=io.StringIO(), force_terminal=True)
        console.print(text, soft_wrap=True)
        target = Path(args.svg).expanduser()
        try:
            console.save_svg(str(target), title=f"gcptui plot {' '.join(runs)}")
        except OSError as error:
            raise ConfigError(f"cannot write {target}: {error.strerror}: pick another --svg FILE") from None
        err.print(f"wrote {target}")
        return 0
    out = Console(highlight=False)
    width = out.width if out.is_terminal else PLAIN_WIDTH
    rows = max(12, out.height - 4) if out.is_terminal else 24
    out.print(render(runs, view, width=width, height=plot_height(rows, list(runs), width)), soft_wrap=True)
    return 0
