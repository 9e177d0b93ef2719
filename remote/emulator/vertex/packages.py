"""``pythonPackageSpec`` workers, as Vertex AI's prebuilt training images run them: fetch each of
``packageUris`` (``gs://`` through Cloud Storage, the emulator's bucket where ``STORAGE_EMULATOR_HOST``
points), install them, then ``python -m pythonModule args...``.

The emulated task has no package index and no build tools (a bare machine, as the VM is): a wheel or
a source distribution of pure Python is unpacked onto ``sys.path`` rather than built by pip, and what
it requires must be on the task's Python already (a real image pip-installs ``install_requires``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

# Run by the task's Python: argv[1] the package URIs (JSON), argv[2] the module, then its arguments.
_RUNNER = r"""
import json, os, runpy, sys, tarfile, zipfile
uris, module, args = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
here = os.getcwd()
for index, uri in enumerate(uris):
    path = uri
    if uri.startswith("gs://"):
        from google.cloud import storage
        bucket, _, name = uri[len("gs://"):].partition("/")
        path = os.path.join(here, f"package-{index}")
        storage.Client(project=os.environ.get("CLOUD_ML_PROJECT_ID")).bucket(bucket).blob(name).download_to_filename(path)
    target = os.path.join(here, "packages", str(index))
    if zipfile.is_zipfile(path):  # a wheel: its top level is the import root
        with zipfile.ZipFile(path) as archive:
            archive.extractall(target)
        sys.path.insert(0, target)
    else:  # a source distribution: NAME-VERSION/ holds the packages
        with tarfile.open(path) as archive:
            archive.extractall(target, filter="data")
        for top in sorted(os.listdir(target)):
            sys.path.insert(0, os.path.join(target, top))
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def package_argv(spec: dict[str, Any]) -> list[str]:
    """The task's command for a ``pythonPackageSpec`` (``executorImageUri`` is a name only)."""
    uris = [str(u) for u in spec.get("packageUris") or []]
    args = [str(a) for a in spec.get("args") or []]
    return [sys.executable, "-c", _RUNNER, json.dumps(uris), str(spec["pythonModule"]), *args]
