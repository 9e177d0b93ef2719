"""`gcptui plot NAME... [--metric M] [--svg FILE | --png FILE]`: the curves screen's plot, headless.

Each machine's metrics file is read once over its exec channel (remote/telemetry/history.py), and the
TensorBoard event files below its run directory (``[sync].dest``) with TensorBoard's reader
(remote/telemetry/tb_events.py: their tags are the metrics ``tb:TAG``); a TPU node is each of its
workers (``NODE/w0``, ...), as ``services.machines`` names them. A NAME that is a path (``./DIR``,
``../DIR``, ``/DIR``, ``~/DIR``) is a run directory on this machine (one ``gcptui pull`` copied): its
event files are read. The curves of one metric (default: the loss, else the first reported) are
drawn with gcptui's one plotting engine (tui/plots.py): to the terminal (plain text when stdout is no
terminal), as an SVG of the same rendering (Rich's console export) or as a PNG of it (tui/cli/png.py,
the ``png`` extra).
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
from gcptui.remote.telemetry.tb_events import EventSource, LocalEvents, RemoteEvents, read_events
from gcptui.tui.cli.common import with_services
from gcptui.tui.curves.data import DEFAULT_METRIC, View, metrics_of, plot_height, read_history, render

READ_TIMEOUT = 60.0
SVG_WIDTH = 120  # columns of an exported plot: a report's page, whatever the terminal is
SVG_ROWS = 30
PLAIN_WIDTH = 100  # a pipe has no width; Rich would take 80
LOCAL_PREFIXES = ("./", "../", "/", "~")


def is_local(name: str) -> bool:
    """A NAME that is a folder on this machine: a path (no machine's name starts so)."""
    return name.startswith(LOCAL_PREFIXES) or name in (".", "..")


def run_plot(args: argparse.Namespace) -> int:
    if args.png:
        from gcptui.tui.cli.png import require_pillow

        require_pillow()  # before any reading
    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)  # machine text: no markup
    names = list(dict.fromkeys(args.name))
    runs: dict[str, MetricHistory] = {name: MetricHistory() for name in names if is_local(name)}

    async def events(name: str, source: EventSource, *, quiet: bool = False) -> None:
        try:
            for line in await within(READ_TIMEOUT, read_events(source, runs[name])):
                err.print(one_line(f"{name}: {line}"))
        except (GcptuiError, OSError, TimeoutError) as error:
            if not quiet:  # ``quiet``: the metrics file's failure said it already
                err.print(
                    one_line(f"{name}: could not read its event files ({error or type(error).__name__})")
                )

    async def machines(services: Services) -> None:
        instances = await services.machines([n for n in names if not is_local(n)])
        config = services.config
        path = metrics_path(config.job, config.sync.dest)
        runs.update({i.name: MetricHistory() for i in instances})

        async def one(instance: Instance) -> None:
            channel = services.channel(instance)
            failed = False
            try:
                await within(READ_TIMEOUT, read_history(channel, path, runs[instance.name]))
            except (GcptuiError, OSError, TimeoutError) as error:
                err.print(
                    one_line(f"{instance.name}: could not read {path} ({error or type(error).__name__})")
                )
                failed = True
            await events(instance.name, RemoteEvents(channel, config.sync.dest), quiet=failed)

        await asyncio.gather(*(one(i) for i in instances))

    async def local() -> None:
        for name in runs:
            folder = Path(name).expanduser()
            if not folder.is_dir():
                raise ConfigError(
                    f"{name} is no folder here: give a run directory (one `gcptui pull` copied)"
                )
            await events(name, LocalEvents(folder))

    asyncio.run(local())
    if any(not is_local(n) for n in names):
        with_services(args, machines)
    runs = {name: runs[name] for name in [*names, *runs] if name in runs}  # the order asked (workers after)
    return _draw(args, runs, err)


def _draw(args: argparse.Namespace, runs: dict[str, MetricHistory], err: Console) -> int:
    known = metrics_of(runs)
    metric = args.metric or (known[0] if known and DEFAULT_METRIC not in known else DEFAULT_METRIC)
    if metric not in known:
        choices = ", ".join(known) if known else "none yet (has the job written progress lines?)"
        raise ConfigError(f"no run reports the metric {metric!r}: the metrics reported are {choices}")
    view = View(metric=metric)
    if args.svg or args.png:
        text = render(runs, view, width=SVG_WIDTH, height=plot_height(SVG_ROWS, list(runs), SVG_WIDTH))
        if args.png:
            from gcptui.tui.cli.png import write_png

            target = Path(args.png).expanduser()
            write_png(text, SVG_WIDTH, target)
        else:
            target = Path(args.svg).expanduser()
            console = Console(record=True, width=SVG_WIDTH, file=io.StringIO(), force_terminal=True)
            console.print(text, soft_wrap=True)
            try:
                console.save_svg(str(target), title=one_line(f"gcptui plot {' '.join(runs)}"))
            except OSError as error:
                raise ConfigError(
                    f"cannot write {target}: {error.strerror}: pick another --svg FILE"
                ) from None
        err.print(f"wrote {target}")
        return 0
    out = Console(highlight=False)
    width = out.width if out.is_terminal else PLAIN_WIDTH
    rows = max(12, out.height - 4) if out.is_terminal else 24
    out.print(render(runs, view, width=width, height=plot_height(rows, list(runs), width)), soft_wrap=True)
    return 0
