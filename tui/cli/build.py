"""``gcptui build [--dockerfile PATH] [--tag T] [--yes]``: the project's image, built by Cloud Build.

Its log lines (sanitized: the builder's text is the tree's) and notes go to stderr; the last stdout
line is the image's reference with its digest, for scripts (``vertex submit --image``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gcptui.remote.build_workflows import BuildOptions, Built, run_build
from gcptui.remote.config import Config
from gcptui.remote.safe_text import one_line, sanitize
from gcptui.remote.services import Services
from gcptui.tui.cli.common import ask_line, with_services


def _note(line: str) -> None:
    print(one_line(sanitize(line, colours=False)), file=sys.stderr, flush=True)


def _log(text: str) -> None:
    for line in text.splitlines():
        print(sanitize(line, colours=False), file=sys.stderr, flush=True)


def consent(yes: bool):  # type: ignore[no-untyped-def]
    """Yes with ``--yes``; else asked at a terminal; never yes without one."""

    def ask(question: str) -> bool:
        if yes:
            return True
        if not sys.stdin.isatty():
            return False
        answer = ask_line(f"{question} [y/N] ")
        return answer is not None and answer.strip().lower() in ("y", "yes")

    return ask


def build_image(config: Config, dockerfile: str, tag: str, yes: bool) -> Built:
    """Blocking: the build (or the image an unchanged context already has)."""
    options = BuildOptions(dockerfile=dockerfile, tag=tag)
    return run_build(config, options, consent=consent(yes), say=_note, log=_log)


def run_build_command(args: argparse.Namespace) -> int:
    async def body(services: Services) -> int:
        built = await asyncio.to_thread(build_image, services.config, args.dockerfile, args.tag, args.yes)
        print(("built " if built.rebuilt else "unchanged, not rebuilt: ") + built.reference.split("@")[0])
        print(built.reference)  # last line on stdout: the image with its digest
        return 0

    return with_services(args, body)
