"""The emulator's Dockerfile reading (cloudbuild/dockerfile.py): what lands in the image and its config,
and the lines Docker refuses. Plain files, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.emulator.cloudbuild.dockerfile import DockerfileError, build_image, context_digest, parse


def _context(tmp_path: Path) -> Path:
    context = tmp_path / "ctx"
    (context / "src" / "pkg").mkdir(parents=True)
    (context / "src" / "pkg" / "a.py").write_text("a")
    (context / "req.txt").write_text("torch")
    (context / "run.sh").write_text("echo")
    return context


def test_copy_env_workdir_and_the_entrypoint_forms(tmp_path: Path) -> None:
    context = _context(tmp_path)
    text = (
        "ARG V=1\nFROM python:3.11 AS base\nWORKDIR /opt/app\nCOPY req.txt ./\nCOPY src/ code/\n"
        'ADD run.sh /bin/go.sh\nENV A=1 B="two words"\nENV C three words\nUSER trainer\n'
        "ENTRYPOINT python -m pkg\n"
    )
    say: list[str] = []
    config = build_image(parse(text), context, tmp_path / "rootfs", say)
    root = tmp_path / "rootfs"
    assert (root / "opt/app/req.txt").read_text() == "torch"
    assert (root / "opt/app/code/pkg/a.py").read_text() == "a"  # a folder's contents, not the folder
    assert (root / "bin/go.sh").read_text() == "echo"
    assert config.base == "python:3.11" and config.workdir == "/opt/app"
    assert config.env == {"A": "1", "B": "two words", "C": "three words"}
    assert config.entrypoint == ["/bin/sh", "-c", "python -m pkg"] and config.cmd == []
    assert say[0] == "Step 1/9 : FROM python:3.11 AS base"
    assert " ---> recorded (the emulator does not execute it)" in say


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("COPY . /app\n", "must start with FROM"),
        ("FROM x\nFETCH y\n", "line 2: unknown instruction: FETCH"),
        ("FROM x\nCOPY ../secret /app\n", "outside the build context"),
        ("FROM x\nCOPY ../* /app/\n", "outside the build context"),
        ("FROM x\nCOPY /etc/pass* /app/\n", "not found in the build context"),
        ("FROM x\nCOPY nothing.txt /app/\n", "nothing.txt: not found"),
        ('FROM x\nCMD ["a", 1]\n', "must list strings"),
        ("FROM x\nRUN a \\\n", "continuation"),
    ],
)
def test_lines_docker_refuses(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DockerfileError, match=message):
        build_image(parse(text), _context(tmp_path), tmp_path / "rootfs", [])


def test_the_digest_follows_the_context_only(tmp_path: Path) -> None:
    context = _context(tmp_path)
    first = context_digest(context)
    assert first == context_digest(context)
    (context / "run.sh").write_text("echo 2")
    assert context_digest(context) != first
