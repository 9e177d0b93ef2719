"""An emulated VM's persistent disk: ``DIR/vms/NAME/`` with HOME, a bin directory and the host key.

Everything that must survive stop/start (files, the host key) lives here, so a restarted VM has the
same disk and the same host key, as on GCE.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gcptui.remote.emulator.core.names import Accelerator, valid_name

# What nvidia-smi reports for GCE's accelerator types: product name, memory (MiB), power limit (W).
GPU_MODELS: dict[str, tuple[str, int, float]] = {
    "nvidia-l4": ("NVIDIA L4", 23034, 72.0),
    "nvidia-tesla-t4": ("Tesla T4", 15360, 70.0),
    "nvidia-tesla-v100": ("Tesla V100-SXM2-16GB", 16384, 300.0),
    "nvidia-tesla-a100": ("NVIDIA A100-SXM4-40GB", 40960, 400.0),
    "nvidia-a100-80gb": ("NVIDIA A100-SXM4-80GB", 81920, 400.0),
    "nvidia-h100-80gb": ("NVIDIA H100 80GB HBM3", 81559, 700.0),
    "nvidia-h100-mega-80gb": ("NVIDIA H100 80GB HBM3", 81559, 700.0),
    "nvidia-h200-141gb": ("NVIDIA H200", 143771, 700.0),
}


def disk_root(vms_dir: Path, name: str) -> Path:
    """``vms_dir/name``, refused (ValueError) unless ``name`` is a GCE name and the path stays inside."""
    if not valid_name(name):
        raise ValueError(
            f"{name!r} is not a valid instance name (RFC 1035: lowercase letters, digits, hyphens)"
        )
    return _inside(vms_dir, vms_dir / name)


def _inside(root: Path, path: Path) -> Path:
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root or real == real_root:
        raise ValueError(f"{path} is outside {root}")
    return path


@dataclass(frozen=True)
class VmDisk:
    """Paths on one VM's disk; ``prepare()`` creates what is missing and keeps what exists."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def bin(self) -> Path:
        return self.root / "usr" / "local" / "bin"

    @property
    def host_key_path(self) -> Path:
        return self.root / "etc" / "ssh" / "ssh_host_ed25519_key"

    def prepare(self, gpus: tuple[Accelerator, ...]) -> asyncssh.SSHKey:
        """Create HOME, the bin dir (with nvidia-smi for a GPU VM) and the host key; return the key."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.bin.mkdir(parents=True, exist_ok=True)
        self._install_nvidia_smi(gpus)
        return self.host_key()

    def host_key(self) -> asyncssh.SSHKey:
        """The VM's host key, generated once and kept on the disk."""
        path = self.host_key_path
        if path.exists():
            return asyncssh.read_private_key(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519")
        key.write_private_key(path)
        path.chmod(0o600)
        key.write_public_key(path.with_suffix(".pub"))
        return key

    def _install_nvidia_smi(self, gpus: tuple[Accelerator, ...]) -> None:
        target = self.bin / "nvidia-smi"
        if not gpus:
            target.unlink(missing_ok=True)  # a VM without GPUs has no driver tools
            return
        models = []
        for gpu in gpus:
            name, memory, power = GPU_MODELS.get(gpu.type, (gpu.type.upper(), 16384, 250.0))
            models += [{"name": name, "memory_total": memory, "power_limit": power}] * gpu.count
        (self.bin / "gpus.json").write_text(json.dumps(models))
        source = (Path(__file__).parent / "fake_nvidia_smi.py").read_text()
        # -IS: no site-packages to scan (the stand-in needs only the standard library): a real
        # nvidia-smi is a small binary, and every start here takes CPU from the emulated jobs.
        target.write_text(f"#!{sys.executable} -IS\n{source}")
        target.chmod(0o755)

    def destroy(self) -> None:
        """Delete the disk (GCE deletes an auto-delete boot disk with its instance); never a symlink's target."""
        if self.root.is_symlink():
            self.root.unlink()
            return
        _inside(self.root.parent, self.root)
        shutil.rmtree(self.root, ignore_errors=True)


# HBM per chip, GiB, as tpu-info reports it (v2's two cores share 16 GiB).
TPU_HBM_GIB = {"v2": 16.0, "v3": 32.0, "v4": 31.25, "v5p": 95.74, "v5litepod": 15.75, "v6e": 31.25}


def install_tpu_info(disk: Path, generation: str, chips: int) -> None:
    """Put the ``tpu-info`` stand-in on a TPU worker's disk (its chips in ``tpus.json`` beside it)."""
    bin_dir = VmDisk(disk).bin
    bin_dir.mkdir(parents=True, exist_ok=True)
    label = "v5e" if generation == "v5litepod" else generation
    spec = {"generation": label, "chips": chips, "hbm_gib": TPU_HBM_GIB.get(generation, 16.0)}
    (bin_dir / "tpus.json").write_text(json.dumps(spec))
    target = bin_dir / "tpu-info"
    source = (Path(__file__).parent / "fake_tpu_info.py").read_text()
    target.write_text(f"#!{sys.executable} -IS\n{source}")
    target.chmod(0o755)
