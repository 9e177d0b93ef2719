"""Pure logic of multi-node groups: config validation, the torchrun command, the group's state."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gcptui.remote.config import GroupConfig, parse_config
from gcptui.remote.errors import ConfigError
from gcptui.remote.jobs.group import group_state, processes_per_node, program_words, torchrun_command
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.models import Gpu, Instance

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "REFERENCE.md"


def test_groups_validate_names_and_vms(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ok = parse_config(
        '[[groups]]\nname = "big"\nvms = ["n0", "n1"]\nnproc_per_node = 2\n', tmp_path / "c.toml"
    )
    assert ok.group("big") == GroupConfig(name="big", vms=["n0", "n1"], nproc_per_node=2)
    for text, needle in [
        ('[[groups]]\nname = "a"\nvms = []\n', "vms"),
        ('[[groups]]\nname = "a"\nvms = ["x", "x"]\n', "appears twice"),
        (
            '[[groups]]\nname = "a"\nvms = ["x"]\n[[groups]]\nname = "a"\nvms = ["y"]\n',
            "group name 'a' appears twice",
        ),
        ('[[groups]]\nname = "a b"\nvms = ["x"]\n', "name"),
    ]:
        with pytest.raises(ConfigError) as caught:
            parse_config(text, tmp_path / "c.toml")
        assert needle in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("python -m gcptui_trainer --steps 5", ["-m", "gcptui_trainer", "--steps", "5"]),
        ("python3 train.py --lr 0.1", ["train.py", "--lr", "0.1"]),
        ("./train --x", ["--no-python", "./train", "--x"]),
        ("python -u train.py", ["--no-python", "python", "-u", "train.py"]),
        ("cd src && python train.py", ["--no-python", "sh", "-c", "cd src && python train.py"]),
        ("FOO=1 python train.py", ["--no-python", "sh", "-c", "FOO=1 python train.py"]),
    ],
)
def test_the_users_command_stays_theirs_under_torchrun(command: str, words: list[str]) -> None:
    assert program_words(command) == words


def test_torchrun_command_is_quoted_and_static() -> None:
    line = torchrun_command("echo 'a b'; rm -rf x", nnodes=2, nproc=4, rank=1, master="10.0.0.2", port=29500)
    assert shlex.split(line) == [
        "torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--node-rank", "1",
        "--master-addr", "10.0.0.2", "--master-port", "29500",
        "--no-python", "sh", "-c", "echo 'a b'; rm -rf x",
    ]  # fmt: skip


def test_the_reference_describes_the_torchrun_line_a_node_runs() -> None:
    # docs/REFERENCE.md's [[groups]] block (generated from GroupConfig's docstring) once said c10d
    # (--rdzv-backend, --rdzv-endpoint): a user debugging a rendezvous must read the flags it uses.
    section = REFERENCE.read_text(encoding="utf-8").split("### `[[groups]]`", 1)[1].split("\n### ", 1)[0]
    line = torchrun_command("python train.py", nnodes=2, nproc=1, rank=0, master="10.0.0.2", port=29500)
    flags = [word for word in shlex.split(line) if word.startswith("--")]
    assert [flag for flag in flags if flag not in section] == [] and "--rdzv" not in section


def test_processes_per_node_follow_gpus_or_the_setting() -> None:
    def vm(name: str, gpus: int) -> Instance:
        return Instance(name, "z", "RUNNING", gpus=(Gpu("nvidia-l4", gpus),) if gpus else ())

    group = GroupConfig(name="g", vms=["a", "b"])
    assert processes_per_node(group, [vm("a", 0), vm("b", 0)]) == 1
    assert processes_per_node(group, [vm("a", 4), vm("b", 4)]) == 4
    with pytest.raises(ConfigError, match="different GPU counts"):
        processes_per_node(group, [vm("a", 4), vm("b", 2)])
    assert (
        processes_per_node(GroupConfig(name="g", vms=["a", "b"], nproc_per_node=2), [vm("a", 4), vm("b", 2)])
        == 2
    )


def test_group_state_is_running_only_when_every_node_runs() -> None:
    def s(state: str) -> JobStatus:
        return JobStatus("n", state)  # type: ignore[arg-type]

    assert group_state([s("running"), s("running")]) == "running"
    assert group_state([s("running"), s("killed")]) == "partial"
    assert group_state([s("exited"), s("killed")]) == "killed"
    assert group_state([s("exited"), s("exited")]) == "exited"
    assert group_state([s("none"), s("none")]) == "none"
