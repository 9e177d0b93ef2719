"""The real ``kubectl`` is the judge of the emulated cluster's Kubernetes API: what a user runs
against a GKE cluster (get -o json, describe, logs -f, delete, rollout restart, apply) works here.

One cluster serves the whole file (its module fixture): each kubectl start costs ~0.1 s of CPU."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gcptui.remote.emulator.thread import EmulatorThread

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

KUBE_VERSION = "1.31"  # the emulated control plane's
STATEFULSET = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: trainer, labels: {gcptui: train}}
spec:
  replicas: 2
  serviceName: trainer
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: train
        image: us-docker.pkg.dev/example/trainer:latest
        command: ["sh", "-c"]
        args: ["echo hello from $HOSTNAME; nvidia-smi -L; i=0; while true; do echo step $i; i=$((i+1)); sleep 0.2; done"]
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: evaluate}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: eval, image: busybox, command: ["sh", "-c", "echo evaluated"]}
"""


class Cluster:
    def __init__(self, emu: EmulatorThread, root: Path) -> None:
        self.emu = emu
        self.root = root

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["kubectl", "--kubeconfig", str(self.emu.kubeconfig), *args],
                                capture_output=True, text=True, timeout=timeout)  # fmt: skip
        assert not check or result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def wait(self, what: str, until: str, timeout: float = 30) -> None:
        self.kubectl("wait", what, f"--for={until}", f"--timeout={int(timeout)}s", timeout=timeout + 10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("gke")
    with EmulatorThread(root / "emu", ssh=False) as emu:
        emu.add_gke_cluster("training", "us-central1-a", nodes=2)
        (root / "sts.yaml").write_text(STATEFULSET)
        (root / "job.yaml").write_text(JOB)
        yield Cluster(emu, root)


def test_apply_get_describe_logs(cluster: Cluster) -> None:
    applied = cluster.kubectl("apply", "--validate=false", "-f", str(cluster.root / "sts.yaml"))
    assert applied.stdout.strip() == "statefulset.apps/trainer created"
    cluster.wait("pod/trainer-1", "condition=Ready")
    listed = cluster.json("get", "pods,statefulsets,jobs,nodes")
    kinds = [item["kind"] for item in listed["items"]]
    assert kinds == ["Pod", "Pod", "StatefulSet", "Node", "Node"]
    for item in listed["items"]:  # Kubernetes' own JSON schemas, no field they do not define
        kubernetes_validate.validate(item, KUBE_VERSION, strict=True)
    pods = {p["metadata"]["name"]: p for p in listed["items"] if p["kind"] == "Pod"}
    nodes = [n for n in listed["items"] if n["kind"] == "Node"]
    assert all(n["metadata"]["labels"]["cloud.google.com/gke-spot"] == "true" for n in nodes)
    # Scheduled across both nodes, owned by the StatefulSet, Running and Ready.
    assert {p["spec"]["nodeName"] for p in pods.values()} == {n["metadata"]["name"] for n in nodes}
    for pod in pods.values():
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
        assert pod["status"]["phase"] == "Running"
    # Without -o, kubectl prints the server's Table: the columns a real API server gives.
    printed = cluster.kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert printed[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert printed[1].split()[:4] == ["trainer-0", "1/1", "Running", "0"]
    assert cluster.kubectl("get", "sts").stdout.splitlines()[1].split()[:2] == ["trainer", "2/2"]
    described = cluster.kubectl("describe", "pod", "trainer-0").stdout
    assert "Controlled By:  StatefulSet/trainer" in described and "Status:         Running" in described

    # logs: the container's stdout, the node's nvidia-smi stand-in on PATH, tail and timestamps.
    out = cluster.kubectl("logs", "trainer-0", "--tail=-1").stdout.splitlines()
    assert out[0] == "hello from trainer-0" and out[1].startswith("GPU 0: NVIDIA L4")
    stamped = cluster.kubectl("logs", "trainer-0", "--tail=1", "--timestamps").stdout.strip()
    assert stamped.split(" ", 1)[0].endswith("Z") and stamped.split(" ", 1)[1].startswith("step ")

    # exec over WebSocket (v5.channel.k8s.io): stdout, stderr, stdin to its end of file, exit status.
    done = cluster.kubectl(
        "exec", "trainer-0", "--", "sh", "-c", "echo $HOSTNAME; nvidia-smi -L >/dev/null; echo err >&2"
    )
    assert (done.stdout, done.stderr) == ("trainer-0\n", "err\n")
    piped = subprocess.run(["kubectl", "--kubeconfig", str(cluster.emu.kubeconfig), "exec", "-i", "trainer-1", "--",
                            "sh", "-c", "cat; exit 3"], input="piped\n", capture_output=True, text=True, timeout=30)  # fmt: skip
    assert (piped.returncode, piped.stdout) == (3, "piped\n") and "exit code 3" in piped.stderr

    # Selectors and paging, as the API serves them to any client.
    assert [p["metadata"]["name"] for p in cluster.json("get", "pods", "-l", "app=trainer,apps.kubernetes.io/pod-index in (1)")["items"]] == ["trainer-1"]  # fmt: skip
    node = pods["trainer-0"]["spec"]["nodeName"]
    on_node = cluster.json("get", "pods", "--field-selector", f"spec.nodeName={node}")["items"]
    assert [p["metadata"]["name"] for p in on_node] == ["trainer-0"]
    paged = cluster.kubectl("get", "pods", "--chunk-size=1", "-o", "name", "-v=6").stderr
    assert "continue=" in paged
    bad = cluster.kubectl("get", "pods", "--field-selector", "spec.color=red", check=False)
    assert bad.returncode == 1 and "is not a known field selector" in bad.stderr
    missing = cluster.kubectl("get", "pod", "nothing", check=False)
    assert 'pods "nothing" not found' in missing.stderr


SHELL = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: shell}
spec:
  replicas: 1
  serviceName: shell
  selector: {matchLabels: {app: shell}}
  template:
    metadata: {labels: {app: shell}}
    spec:
      containers:
      - {name: main, image: busybox, command: ["sh", "-c", "while true; do sleep 1; done"]}
"""


def test_exec_with_a_terminal_gives_the_shell_a_tty_its_size_and_each_resize(cluster: Cluster) -> None:
    """``kubectl exec -it``, as a person types it: a tty on the pod's side (TTY: true, stderr folded
    into it), the terminal's size at the start, a resize (channel 4) after SIGWINCH, the exit status."""
    (cluster.root / "shell.yaml").write_text(SHELL)
    cluster.kubectl("apply", "--validate=false", "-f", str(cluster.root / "shell.yaml"))
    cluster.wait("pod/shell-0", "condition=Ready")
    master, slave = pty.openpty()
    _set_size(slave, 30, 100)
    kubectl = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(cluster.emu.kubeconfig), "exec", "-it", "shell-0", "--", "sh"],
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    screen = Screen(master)
    try:
        screen.type("tty -s && echo is-a-tty; stty size\n")
        screen.until("30 100")
        assert "is-a-tty" in screen.text
        _set_size(master, 40, 120)
        kubectl.send_signal(signal.SIGWINCH)  # what the terminal sends its foreground process
        # The resize travels beside the keys: ask until the shell sees the new size.
        screen.until("40 120", ask="stty size\n")
        screen.type("exit 4\n")
        assert kubectl.wait(timeout=30) == 4
    finally:
        if kubectl.poll() is None:
            kubectl.kill()
            kubectl.wait()
        os.close(master)


class Screen:
    """What kubectl wrote to its terminal, read with a deadline (select), never a sleep."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = ""

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def until(self, wanted: str, *, ask: str = "", timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        seen = len(self.text)
        if ask:
            self.type(ask)
        while wanted not in self.text[seen:]:
            left = deadline - time.monotonic()
            assert left > 0, f"{wanted!r} not on the screen within {timeout}s: {self.text[-500:]!r}"
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    self.text += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # EIO: kubectl closed the terminal
                    raise AssertionError(f"kubectl ended before {wanted!r}: {self.text[-500:]!r}") from None
            elif ask:
                self.type(ask)


def _set_size(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def test_logs_follow_delete_and_rollout_restart(cluster: Cluster) -> None:
    cluster.wait("pod/trainer-1", "condition=Ready")
    before = cluster.json("get", "pod", "trainer-1")["metadata"]["uid"]
    follow = subprocess.Popen(["kubectl", "--kubeconfig", str(cluster.emu.kubeconfig), "logs", "-f", "trainer-1"],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert follow.stdout is not None
    assert follow.stdout.readline() == "hello from trainer-1\n"
    # delete: graceful (SIGTERM), kubectl waits until the pod is gone; the StatefulSet makes a new one.
    assert cluster.kubectl("delete", "pod", "trainer-1").stdout.strip() == 'pod "trainer-1" deleted'
    # logs -f of the deleted pod's container ends (it was followed until its process went).
    assert follow.wait(timeout=15) == 0
    cluster.wait("pod/trainer-1", "condition=Ready")
    replaced = cluster.json("get", "pod", "trainer-1")
    assert replaced["metadata"]["uid"] != before

    # rollout restart: a template annotation, a new revision, every pod replaced (highest ordinal first).
    uids = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in cluster.json("get", "pods", "-l", "app=trainer")["items"]
    }
    assert "restarted" in cluster.kubectl("rollout", "restart", "statefulset", "trainer").stdout
    cluster.kubectl("rollout", "status", "statefulset", "trainer", "--timeout=60s", timeout=70)
    sts = cluster.json("get", "statefulset", "trainer")
    assert "kubectl.kubernetes.io/restartedAt" in sts["spec"]["template"]["metadata"]["annotations"]
    assert sts["metadata"]["generation"] == 2 and sts["status"]["updatedReplicas"] == 2
    after = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in cluster.json("get", "pods", "-l", "app=trainer")["items"]
    }
    assert after.keys() == uids.keys() and not set(after.values()) & set(uids.values())


def test_job_runs_to_completion_and_bad_objects_are_refused(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--validate=false", "-f", str(cluster.root / "job.yaml"))
    cluster.wait("job/evaluate", "condition=Complete")
    job = cluster.json("get", "job", "evaluate")
    kubernetes_validate.validate(job, KUBE_VERSION, strict=True)
    for pod in cluster.json("get", "pods", "-l", "job-name=evaluate")["items"]:
        kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
    assert job["status"]["succeeded"] == 1
    assert cluster.kubectl("logs", "job/evaluate").stdout == "evaluated\n"
    bad = cluster.root / "bad.yaml"
    bad.write_text(
        STATEFULSET.replace("name: trainer,", "name: other,").replace(
            "{app: trainer}}\n  template", "{app: other}}\n  template"
        )
    )
    refused = cluster.kubectl("apply", "--validate=false", "-f", str(bad), check=False)
    assert refused.returncode == 1 and "`selector` does not match template `labels`" in refused.stderr
    # No token, no cluster.
    config = json.loads(cluster.emu.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = "wrong"
    wrong = cluster.root / "wrong-kubeconfig"
    wrong.write_text(json.dumps(config))
    denied = subprocess.run(
        ["kubectl", "--kubeconfig", str(wrong), "get", "pods"], capture_output=True, text=True, timeout=30
    )
    assert denied.returncode == 1 and "Unauthorized" in denied.stderr
