"""A Dockerfile read and "built" as the emulator can: an image is a folder, not layers.

The instructions read: ``FROM`` (first; recorded: the base image is a name only, the task runs on the
emulator's own Python), ``COPY``/``ADD`` (context files into the image's root filesystem),
``WORKDIR``, ``ENV``, ``ENTRYPOINT``, ``CMD``; ``RUN`` and ``ARG``/``LABEL``/``EXPOSE``/``USER`` are
recorded in the build log but not executed (the emulator installs nothing). Anything else, or a
malformed line, fails the build with Docker's wording and the line number, as a real build fails.

The image's digest is sha256 over the context's files (each relative path and the sha256 of its
bytes, sorted) and the Dockerfile: an unchanged context yields the same digest.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

RECORDED = {"RUN", "ARG", "LABEL", "EXPOSE", "USER", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
            "ONBUILD", "MAINTAINER"}  # fmt: skip
READ = {"FROM", "COPY", "ADD", "WORKDIR", "ENV", "ENTRYPOINT", "CMD"}


class DockerfileError(ValueError):
    """A Dockerfile Docker would refuse (the build fails with this line)."""


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    text: str  # the arguments, continuations joined


@dataclass
class ImageConfig:
    base: str = ""
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)

    def json(self) -> dict[str, object]:
        return {"base": self.base, "workdir": self.workdir, "env": self.env, "entrypoint": self.entrypoint,
                "cmd": self.cmd}  # fmt: skip


def parse(text: str) -> list[Instruction]:
    """The Dockerfile's instructions (comments and blank lines skipped, ``\\`` continuations joined)."""
    out: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole, pending = pending + stripped, ""
        keyword, _, rest = whole.partition(" ")
        keyword = keyword.upper()
        if keyword not in READ | RECORDED:
            raise DockerfileError(f"dockerfile parse error on line {start}: unknown instruction: {keyword}")
        out.append(Instruction(start, keyword, rest.strip()))
    if pending:
        raise DockerfileError("dockerfile parse error: the last line ends with a continuation")
    if not out or out[0].keyword not in ("FROM", "ARG"):
        raise DockerfileError("no build stage in current context: the Dockerfile must start with FROM")
    return out


def _words(instruction: Instruction) -> list[str]:
    """``["a", "b"]`` (exec form) or a shell-form line run by ``/bin/sh -c``."""
    text = instruction.text
    if text.startswith("["):
        try:
            words = json.loads(text)
        except ValueError:
            raise DockerfileError(
                f"line {instruction.line}: {instruction.keyword} is not a JSON array"
            ) from None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise DockerfileError(f"line {instruction.line}: {instruction.keyword} must list strings")
        return words
    return ["/bin/sh", "-c", text] if text else []


def _inside(root: Path, relative: str) -> Path:
    """``root/relative``, refused when it leaves ``root`` (``COPY ../secret``)."""
    parts = PurePosixPath(relative).parts
    if ".." in parts:
        raise DockerfileError(f"forbidden path outside the build context: {relative}")
    return root.joinpath(*[p for p in parts if p not in ("/", ".")])


def _copy(instruction: Instruction, context: Path, rootfs: Path, workdir: str) -> None:
    words = [
        w for w in shlex.split(instruction.text) if not w.startswith("--")
    ]  # --chown etc.: no users here
    if len(words) < 2:
        raise DockerfileError(
            f"line {instruction.line}: {instruction.keyword} requires at least two arguments"
        )
    *sources, dest = words
    absolute = dest if dest.startswith("/") else str(PurePosixPath(workdir) / dest)
    target = _inside(rootfs, absolute)
    for source in sources:
        _inside(context, source)  # a ".." anywhere, glob or not, leaves the context
        relative = source.lstrip("/") or "."  # a source is the context's: "/" is its root, as Docker reads it
        glob = any(c in source for c in "*?[")
        matches = sorted(context.glob(relative)) if glob else [_inside(context, relative)]
        if not matches or not all(m.exists() for m in matches):
            raise DockerfileError(
                f"line {instruction.line}: COPY failed: {source}: not found in the build context"
            )
        for found in matches:
            if found.is_dir():
                shutil.copytree(found, target, dirs_exist_ok=True, symlinks=False)
            elif dest.endswith("/") or len(sources) > 1 or len(matches) > 1 or target.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(found, target / found.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(found, target)


def _env(instruction: Instruction, env: dict[str, str]) -> None:
    words = shlex.split(instruction.text)
    if len(words) >= 2 and "=" not in words[0]:  # ENV KEY value with spaces
        env[words[0]] = instruction.text.split(None, 1)[1]
        return
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise DockerfileError(f"line {instruction.line}: ENV names must be KEY=VALUE")
        env[key] = value


def build_image(instructions: list[Instruction], context: Path, rootfs: Path, say: list[str]) -> ImageConfig:
    """Run the instructions into ``rootfs``; each step's line appended to ``say`` (Docker's words)."""
    config = ImageConfig()
    rootfs.mkdir(parents=True, exist_ok=True)
    steps = [i for i in instructions if i.keyword != "ARG" or instructions.index(i) > 0]
    for index, instruction in enumerate(steps, 1):
        say.append(f"Step {index}/{len(steps)} : {instruction.keyword} {instruction.text}")
        if instruction.keyword == "FROM":
            config.base = instruction.text.split()[0] if instruction.text else ""
        elif instruction.keyword in ("COPY", "ADD"):
            _copy(instruction, context, rootfs, config.workdir)
        elif instruction.keyword == "WORKDIR":
            config.workdir = str(PurePosixPath(config.workdir) / instruction.text)
            _inside(rootfs, config.workdir).mkdir(parents=True, exist_ok=True)
        elif instruction.keyword == "ENV":
            _env(instruction, config.env)
        elif instruction.keyword == "ENTRYPOINT":
            config.entrypoint, config.cmd = _words(instruction), []  # as Docker: ENTRYPOINT resets CMD
        elif instruction.keyword == "CMD":
            config.cmd = _words(instruction)
        else:
            say.append(" ---> recorded (the emulator does not execute it)")
    return config


def context_digest(context: Path) -> str:
    """``sha256:HEX`` over the context's regular files (paths and contents), the Dockerfile among them."""
    outer = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file() and not p.is_symlink()):
        inner = hashlib.sha256(path.read_bytes()).hexdigest()
        outer.update(f"{path.relative_to(context).as_posix()}\0{inner}\n".encode())
    return "sha256:" + outer.hexdigest()
