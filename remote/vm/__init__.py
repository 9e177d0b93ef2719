"""Files that run on the VM: the job supervisor (gcptui-job.sh) and the sync agent (sync_agent.py).

They are read as text here and shipped over SSH; none of them is imported on the laptop, and each
must stay one self-contained file (POSIX sh, or Python that any python3 on the VM runs).
"""

from __future__ import annotations

from importlib import resources


def vm_file(name: str) -> bytes:
    """The bytes of one VM-side file of this folder, wherever gcptui is installed."""
    return (resources.files(__name__) / name).read_bytes()
