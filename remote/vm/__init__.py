"""Files that run on the VM: the job supervisor (gcptui-job.sh), the sync agent (sync_agent.py) and
the pull reader (pull_reader.py).

They are read as text here and shipped over SSH; none of them is imported on the laptop, and each
must stay one self-contained file (POSIX sh, or Python that any python3 on the VM runs).
"""

from __future__ import annotations

from importlib import resources


def vm_file(name: str) -> bytes:
    """The bytes of one VM-side file of this folder, wherever gcptui is installed."""
    return (resources.files(__name__) / name).read_bytes()


# Reads exactly the compressed source's length from fd 0 (never past it: what follows on stdin is the
# program's own input), then runs it as __main__.
_BOOT = (
    "import os,zlib\n"
    "n={size};b=b''\n"
    "while len(b)<n:\n"
    " c=os.read(0,n-len(b))\n"
    " if not c:raise SystemExit(1)\n"
    " b+=c\n"
    "exec(compile(zlib.decompress(b),{name!r},'exec'))"
)


def python_over_stdin(name: str, missing: str) -> tuple[str, bytes]:
    """A command line that runs the VM-side Python file ``name`` with the machine's python3, and
    the bytes to write first on its stdin: the source travels compressed over stdin, not in argv,
    whose length a Kubernetes exec URL bounds (and ``ps`` shows). ``missing``: the one line said
    on stderr (exit 127) when the machine has no python3.

    The system interpreter comes first: a version manager's shim (pyenv, asdf) found on PATH costs
    a few hundred ms per start."""
    import shlex
    import zlib

    packed = zlib.compress(vm_file(name), 9)
    boot = shlex.quote(_BOOT.format(size=len(packed), name=name))
    command = (
        "for py in /usr/bin/python3 python3 python; do command -v $py >/dev/null 2>&1 && "
        f"exec $py -I -S -c {boot}; done; "
        f"echo {shlex.quote(missing)} >&2; exit 127"
    )
    return command, packed
