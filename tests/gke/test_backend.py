"""The GKE backend against the emulated cluster: what kubectl applies, gcptui lists (rows of source
"gke" whose workers are pods); what gcptui restarts, kubectl sees restarted; a pod ended by a Spot
node's shutdown reads preempted; a cluster named by resource name is reached through the Container API."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gcptui.remote.compute.backend import BackendContext, Capability
from gcptui.remote.compute.gke.backend import GkeBackend
from gcptui.remote.compute.registry import Compute
from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.models import Instance, State
from tests.cli.test_ls import gcptui

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

MANIFESTS = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: trainer, labels: {team: ml}}
spec:
  replicas: 2
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - name: train
        image: trainer
        command: ["sh", "-c", "while true; do sleep 0.2; done"]
        resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: notebook, labels: {team: ml}}
spec:
  containers:
  - {name: nb, image: nb, command: ["sh", "-c", "while true; do sleep 0.2; done"]}
---
apiVersion: v1
kind: Pod
metadata: {name: unrelated, labels: {team: web}}
spec:
  containers:
  - {name: web, image: web, command: ["sh", "-c", "while true; do sleep 0.2; done"]}
"""


class Setup:
    def __init__(self, emu: EmulatorThread, config: Path) -> None:
        self.emu = emu
        self.config = config

    def kubectl(self, *args: str) -> str:
        result = subprocess.run(["kubectl", "--kubeconfig", str(self.emu.kubeconfig), *args],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    def backend(self) -> GkeBackend:
        backend = GkeBackend.configured(BackendContext(load_config(self.config)))
        assert backend is not None
        return backend


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("gke-backend")
    with EmulatorThread(root / "emu", ssh=False) as emu:
        emu.add_gke_cluster("training", "us-central1-a", nodes=2)
        config = emu.write_config(root / "gcptui.toml")
        config.write_text(
            config.read_text().replace('namespace = "default"', 'namespace = "default"\nselector = "team=ml"')
        )
        (root / "all.yaml").write_text(MANIFESTS)
        found = Setup(emu, config)
        found.kubectl("apply", "--validate=false", "-f", str(root / "all.yaml"))
        found.kubectl(
            "wait", "pod/trainer-0", "pod/trainer-1", "pod/notebook", "--for=condition=Ready", "--timeout=30s"
        )
        yield found


def _rows(backend: GkeBackend) -> dict[str, Instance]:
    listed = backend.list_rows()
    assert listed.errors == ()
    return {row.name: row for row in listed.rows}


def test_what_kubectl_applies_gcptui_lists(setup: Setup) -> None:
    backend = setup.backend()
    rows = _rows(backend)
    assert sorted(rows) == ["notebook", "trainer"]  # the selector leaves the web pod out
    trainer = rows["trainer"]
    assert (trainer.source, trainer.state, trainer.status, trainer.zone) == (
        "gke",
        State.RUNNING,
        "Running",
        "us-central1-a",
    )
    assert [w.name for w in trainer.workers] == ["trainer-0", "trainer-1"]
    assert all(w.state is State.RUNNING for w in trainer.workers)
    assert trainer.spot and trainer.machine_type == "g2-standard-8"
    assert [(g.type, g.count) for g in trainer.gpus] == [("nvidia-l4", 2)]
    assert trainer.labels["gke-kind"] == "StatefulSet" and trainer.labels["gke-node-pool"] == "pool-1"
    assert backend.capabilities(trainer) == {
        Capability.DELETE,
        Capability.PREEMPTIBLE,
        Capability.SHELL,
        Capability.RECOVER,
        Capability.PRICE,
        Capability.CONTAINER_LOGS,  # its containers' own output, through the log API
        Capability.SIMULATE_MAINTENANCE,  # its Spot node is a Compute Engine instance of [gcp]'s project
    }
    pods = backend.pod_rows(trainer)
    assert [p.name for p in pods] == ["trainer/trainer-0", "trainer/trainer-1"]
    assert all(
        p.parent == "trainer" and p.spot and p.labels["gke-node"].startswith("gke-training-pool-1-")
        for p in pods
    )

    # The exec channel reaches each pod (rank 0 by default, a pod by name, a pod's own row).
    async def hostnames() -> list[bytes]:
        channels = [
            backend.exec_channel(trainer),
            backend.exec_channel(trainer, "trainer-1"),
            backend.exec_channel(pods[1]),
        ]
        return [(await c.run("echo $HOSTNAME; nvidia-smi -L | wc -l", timeout=30)).stdout for c in channels]

    assert asyncio.run(hostnames()) == [b"trainer-0\n1\n", b"trainer-1\n1\n", b"trainer-1\n1\n"]

    # gcptui ls --json shows them beside the emulator's VMs, with the DESIGN's fields.
    result = gcptui("ls", "--json", "--config", str(setup.config))
    assert result.returncode == 0, result.stderr
    objects = json.loads(result.stdout)
    gke = {o["name"]: o for o in objects if o["source"] == "gke"}
    assert sorted(gke) == ["notebook", "trainer"]
    assert gke["trainer"]["state"] == "running" and [w["name"] for w in gke["trainer"]["workers"]] == [
        "trainer-0",
        "trainer-1",
    ]


def test_what_gcptui_restarts_kubectl_sees_restarted(setup: Setup) -> None:
    backend = setup.backend()
    before = json.loads(setup.kubectl("get", "pods", "-l", "app=trainer", "-o", "json"))["items"]
    backend.restart(_rows(backend)["trainer"])
    setup.kubectl("rollout", "status", "statefulset", "trainer", "--timeout=60s")
    sts = json.loads(setup.kubectl("get", "statefulset", "trainer", "-o", "json"))
    assert "kubectl.kubernetes.io/restartedAt" in sts["spec"]["template"]["metadata"]["annotations"]
    after = json.loads(setup.kubectl("get", "pods", "-l", "app=trainer", "-o", "json"))["items"]
    assert not {p["metadata"]["uid"] for p in before} & {p["metadata"]["uid"] for p in after}


def test_spot_node_preemption_and_cluster_by_resource_name(setup: Setup) -> None:
    pod = json.loads(setup.kubectl("get", "pod", "notebook", "-o", "json"))
    trainer = json.loads(setup.kubectl("get", "pod", "trainer-0", "-o", "json"))
    setup.emu.preempt_gke_node(pod["spec"]["nodeName"])
    if trainer["spec"]["nodeName"] != pod["spec"]["nodeName"]:
        setup.emu.preempt_gke_node(trainer["spec"]["nodeName"])
    setup.kubectl("wait", "pod/notebook", "--for=jsonpath={.status.phase}=Failed", "--timeout=30s")
    failed = json.loads(setup.kubectl("get", "pod", "notebook", "-o", "json"))["status"]
    assert failed["reason"] == "Terminated" and any(
        c["type"] == "DisruptionTarget" for c in failed["conditions"]
    )
    # A cluster named by resource name: endpoint and CA from the Container API, the Google token.
    gcp = setup.config.read_text().split("\n\n", 1)[0]  # [gcp]: the endpoint and the token file
    by_name = setup.config.with_name("by-name.toml")
    cluster_name = "projects/gcptui-demo/locations/us-central1-a/clusters/training"
    by_name.write_text(f'{gcp}\n\n[[gke]]\ncluster = "{cluster_name}"\nselector = "team=ml"\n')
    backend = GkeBackend.configured(BackendContext(load_config(by_name)))
    assert backend is not None
    rows = _rows(backend)
    assert "notebook" in rows, (rows.keys(), setup.kubectl("get", "pods", "-o", "wide"))
    notebook = rows["notebook"]
    assert (notebook.state, notebook.status, notebook.preempted) == (State.PREEMPTED, "Failed", True)
    backend.delete(notebook)
    gone = subprocess.run(["kubectl", "--kubeconfig", str(setup.emu.kubeconfig), "wait", "pod/notebook", "--for=delete",
                           "--timeout=30s"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert gone.returncode == 0, gone.stderr
    assert "notebook" not in _rows(backend)
    assert Compute.from_context(BackendContext(load_config(by_name))).backends.keys() >= {"gke"}


def test_a_refused_token_is_one_error_line_not_an_empty_cluster(setup: Setup, tmp_path: Path) -> None:
    kubeconfig = json.loads(setup.emu.kubeconfig.read_text())
    kubeconfig["users"][0]["user"]["token"] = "not-the-token"
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    config = tmp_path / "gcptui.toml"
    config.write_text(
        f'[[gke]]\ncontext = "{kubeconfig["contexts"][0]["name"]}"\nkubeconfig = "kubeconfig"\n'
    )
    backend = GkeBackend.configured(BackendContext(load_config(config)))
    assert backend is not None
    listed = backend.list_rows()
    assert listed.rows == ()
    (line,) = listed.errors
    assert "not listed" in line and "denied (Unauthorized)" in line and "\n" not in line


def test_pod_logs_merged_and_followed_across_a_replacement(setup: Setup) -> None:
    from gcptui.remote.compute.gke.pod_logs import follow_pods

    backend = setup.backend()
    cluster = backend.cluster(0)

    async def read() -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []

        async def work(api: object) -> None:
            async for line in follow_pods(cluster, api, "default", ["talker-0", "talker-1"]):  # type: ignore[arg-type]
                seen.append((line.pod, line.text))
                if seen.count(("talker-0", "hello 1")) == 2:
                    return
                if (line.pod, line.text) == ("talker-0", "hello 1") and len(seen) == seen.index(
                    ("talker-0", "hello 1")
                ) + 1:
                    # The pod is replaced (a new one of the same name): its lines are followed on.
                    await asyncio.to_thread(setup.kubectl, "delete", "pod", "talker-0", "--wait=false")

        await asyncio.to_thread(cluster.run, work)  # its own loop, in a worker thread
        return seen

    manifest = setup.config.with_name("talker.json")  # JSON is YAML: no quoting of the script
    script = "echo hello $((${HOSTNAME##*-} + 1)); printf '\\033[2Jbad\\n'; sleep 600"
    container = {"name": "talk", "image": "talk", "command": ["sh", "-c", script]}
    labels = {"app": "talker"}
    manifest.write_text(json.dumps({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "talker", "labels": {"team": "ml"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}))  # fmt: skip
    setup.kubectl("apply", "--validate=false", "-f", str(manifest))
    setup.kubectl("wait", "pod/talker-0", "pod/talker-1", "--for=condition=Ready", "--timeout=30s")
    seen = asyncio.run(read())
    assert ("talker-1", "hello 2") in seen and ("talker-0", "hello 1") in seen
    assert all("\x1b" not in text for _, text in seen)  # the container's escapes never reach the terminal
    assert seen.count(("talker-0", "hello 1")) == 2  # the replacement's own first line
    assert seen.count(("talker-0", "bad")) == 1 or seen[-1] == ("talker-0", "hello 1")  # nothing shown twice


def test_a_job_whose_backoff_a_preemption_spent_is_recreated(setup: Setup) -> None:
    from gcptui.remote.compute.backend import Recovery

    manifest = setup.config.with_name("job.json")
    container = {"name": "work", "image": "work", "command": ["sleep", "600"]}
    manifest.write_text(json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "labels": {"team": "ml"}},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"team": "ml"}},
                 "spec": {"restartPolicy": "Never", "containers": [container]}}}}))  # fmt: skip
    setup.kubectl("apply", "--validate=false", "-f", str(manifest))
    setup.kubectl("wait", "pod", "-l", "job-name=once", "--for=condition=Ready", "--timeout=30s")
    before = json.loads(setup.kubectl("get", "job", "once", "-o", "json"))["metadata"]["uid"]
    pod = json.loads(setup.kubectl("get", "pods", "-l", "job-name=once", "-o", "json"))["items"][0]
    setup.emu.preempt_gke_node(pod["spec"]["nodeName"])
    setup.kubectl("wait", "job/once", "--for=condition=Failed", "--timeout=30s")
    backend = setup.backend()
    row = _rows(backend)["once"]
    assert row.state is State.PREEMPTED and Capability.RECOVER in backend.capabilities(row)
    backend.poll_seconds = 0.05
    assert backend.recover(row) is Recovery.RECREATED
    job = json.loads(setup.kubectl("get", "job", "once", "-o", "json"))
    assert job["metadata"]["uid"] != before and job["status"].get("active") == 1
    assert _rows(backend)["once"].state is State.RUNNING
