"""The keeper's wheelhouse, gathered as `keeper deploy` gathers it, installs with `--no-index` into a
fresh venv of a bare interpreter (no site-packages, no pip configuration): the keeper's command and
the lease's Cloud Storage client work there. The trainer is not in it (the keeper trains nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.errors import GcptuiError
from gcptui.remote.keeper.wheelhouse import PROBE, Target, build_wheelhouse, linux_target, parse_probe

# What a VM's pip sees: no configuration of this machine's (its find-links, its indexes), no index.
BARE_PIP = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}


def bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, **BARE_PIP}


def test_the_wheelhouse_installs_with_no_index_into_a_bare_venv(tmp_path: Path) -> None:
    base = getattr(sys, "_base_executable", sys.executable)
    venv = tmp_path / "venv"
    # No pip of its own (ensurepip costs seconds): this machine's pip installs into it, as deploy's would.
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, env=bare_env(), timeout=120)
    python = venv / "bin" / "python"
    # As deploy: the target is what the VM's python3 says of itself.
    probe = subprocess.run(
        ["sh", "-c", PROBE], capture_output=True, text=True, check=True, timeout=60,
        env={**bare_env(), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"},
    )  # fmt: skip
    target = parse_probe(probe.stdout)
    house = tmp_path / "wheels"
    house.mkdir()
    wheels = build_wheelhouse(house, target)
    names = [w.name for w in wheels]
    assert any(n.startswith("gcptui-") for n in names) and not any(
        n.startswith("gcptui_trainer") for n in names
    )
    assert not any(n.startswith(("torch-", "nvidia_")) for n in names), names
    uploaded = tmp_path / "uploaded"  # deploy copies the listed wheels into one folder on the VM
    uploaded.mkdir()
    for wheel in wheels:
        shutil.copy(wheel, uploaded / wheel.name)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile", "--no-index",
         "--find-links", str(uploaded), "gcptui"],
        capture_output=True, text=True, env=bare_env(), timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    isolated = subprocess.run(
        [python, "-c", "import sys; print(sys.flags.no_site, [p for p in sys.path if 'site-packages' in p])"],
        capture_output=True, text=True, check=True, env=bare_env(),
    )  # fmt: skip
    assert str(venv) in isolated.stdout and "versions" not in isolated.stdout.split("[", 1)[1]
    # `gcptui keeper run --help` from the venv (outside the checkout: only the installed package counts).
    helped = subprocess.run(
        [venv / "bin" / "gcptui", "keeper", "run", "--help"], capture_output=True, text=True,
        env=bare_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert helped.returncode == 0 and "--lease-ttl" in helped.stdout, helped.stderr[-2000:]
    lease = subprocess.run(
        [python, "-c", "from google.cloud import storage; import gcptui.remote.keepalive.lease; print(storage.Client)"],
        capture_output=True, text=True, env=bare_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert lease.returncode == 0, lease.stderr[-2000:]


def test_a_laptop_that_cannot_gather_the_wheels_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No index and no folder of wheels: what a laptop offline with an empty cache has.
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # and no earlier deploy's wheels
    with pytest.raises(GcptuiError) as err:
        build_wheelhouse(tmp_path, linux_target("3.11", "x86_64", 36))
    message = str(err.value)
    assert "\n" not in message and "Python 3.11 on manylinux_2_36_x86_64" in message
    assert "PIP_FIND_LINKS" in message, message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("3 11 linux x86_64 glibc 2.36\n", linux_target("3.11", "x86_64", 36)),
        ("3 12 darwin arm64 14.5", Target("3.12", ("macosx_14_5_arm64",))),
    ],
)
def test_the_vms_python_is_read_from_its_own_line(line: str, expected: Target) -> None:
    assert parse_probe(line) == expected


@pytest.mark.parametrize(
    "line",
    ["", "Python 3.11", "3 11 linux x86_64 musl 1.2", "3 11 linux x86;rm glibc 2.36", "3 11 win32 AMD64"],
)
def test_a_probe_line_that_is_not_one_is_refused(line: str) -> None:
    with pytest.raises(GcptuiError):
        parse_probe(line)
