"""The real ``gcloud container clusters list|describe`` against the emulator's Container API
(``api_endpoint_overrides/container``); every exchange checked against container.v1.json."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

from gcptui.remote.emulator.thread import EmulatorThread
from tests.emulator.test_gcloud_conformance import Gcloud

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")


def test_gcloud_lists_and_describes_the_emulated_cluster(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        cluster = emu.add_gke_cluster("training", "us-central1-a", nodes=2)
        gcloud = Gcloud(emu, tmp_path)
        gcloud.env["CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER"] = f"{emu.endpoint}/"
        listed = gcloud(
            "container", "clusters", "list", "--format=value(name,location,status,currentNodeVersion)"
        )
        assert listed.split() == ["training", "us-central1-a", "RUNNING", "1.31.6-gke.1020000"]
        described = gcloud("container", "clusters", "describe", "training", "--location", "us-central1-a",
                           "--format=value(endpoint,masterAuth.clusterCaCertificate,nodePools[0].config.spot)")  # fmt: skip
        endpoint, ca, spot = described.strip().split("\t")
        assert endpoint == cluster.endpoint and spot == "True"
        # The CA gcloud hands out is the one that signed the cluster's API server certificate.
        authority = x509.load_pem_x509_certificate(base64.b64decode(ca))
        served = x509.load_pem_x509_certificate(
            (tmp_path / "emu" / "gke" / "training" / "pki" / "apiserver.crt").read_bytes()
        )
        served.verify_directly_issued_by(authority)
        missing = subprocess.run(["gcloud", "container", "clusters", "describe", "nothing", "--location",
                                  "us-central1-a"], env=gcloud.env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert missing.returncode == 1 and "nothing" in missing.stderr and "Not found" in missing.stderr
