"""The compute seam: where each kind of compute plugs into gcptui.

A *backend* is one kind of compute (GCE VMs, static SSH hosts, later TPU VMs, Vertex AI jobs,
GKE workloads). Each implements ``backend.Backend`` in its own folder below this one
(``compute/gce/``, ``compute/hosts/``, ...) and registers under its ``Source`` name in
``registry.py``. Workflows (keep-alive, sweeps, jobs) and faces (the CLI, the TUI) go through the
registry and a row's ``Capability`` set, never through a backend's folder and never by testing
``Instance.source``; they read the neutral ``State`` and ``StopCause`` (``gcptui.remote.models``),
never a backend's own status word.

"A machine is anything gcptui can run a process on": a backend whose rows have a shell hands out an
``exec_channel.ExecChannel`` (a process with stdin, stdout, stderr and an exit status). SSH is one
implementation (``ssh_exec.py``, shared by every backend whose rows run sshd).

This package's ``__init__`` imports nothing, so ``gcptui.remote.models`` and the faces may import
one module of the seam without loading every backend.
"""
