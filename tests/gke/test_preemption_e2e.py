"""A Spot node's shutdown ends a training pod mid-run; its StatefulSet's replacement pod (a fresh
filesystem) resumes the reference trainer from the [storage] bucket (fake-gcs-server, the real client)
with 0 steps lost beyond the checkpoint the SIGTERM save mirrored; gcptui reads the workload
preempted while its pod ends, then running again on the controller's new pod."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gcptui.remote.compute.backend import BackendContext
from gcptui.remote.compute.gke.backend import GkeBackend
from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.models import State
from tests.helpers.gcs import FakeGcs

BUCKET = "gke-runs"
STEPS = 400


def until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling a condition the emulator's own thread changes


def test_a_preempted_pod_is_replaced_and_resumes_from_the_bucket(fake_gcs: FakeGcs, tmp_path: Path) -> None:
    fake_gcs.make_bucket(BUCKET)
    metrics = tmp_path / "metrics.jsonl"  # outside the pod: both pods' records, appended
    env = {**fake_gcs.env(), "GCPTUI_METRICS": str(metrics), "GCPTUI_CHECKPOINT_URL": f"gs://{BUCKET}/trainer",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    argv = [sys.executable, "-m", "gcptui_trainer", "--run-dir", "run", "--steps", str(STEPS), "--size", "tiny",
            "--checkpoint-every", "100", "--log-every", "1", "--step-delay", "0.03", "--resume"]  # fmt: skip

    def records() -> list[dict[str, object]]:
        text = metrics.read_text() if metrics.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def steps() -> int:
        return max((int(r["step"]) for r in records() if "loss" in r and "step" in r), default=0)  # type: ignore[call-overload]

    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        cluster = emu.add_gke_cluster("training", "us-central1-a", nodes=1)
        cluster.shutdown_grace_seconds = 10.0
        sts = emu.call(cluster.add_statefulset, "trainer", 1, argv)
        sts["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": k, "value": v} for k, v in env.items()
        ]
        emu.call(cluster.store.update, "statefulsets", sts)
        backend = GkeBackend.configured(
            BackendContext(load_config(emu.write_config(tmp_path / "gcptui.toml")))
        )
        assert backend is not None

        def pod() -> dict[str, object] | None:
            return emu.call(cluster.store.get, "pods", "default", "trainer-0")  # type: ignore[no-any-return]

        until(lambda: steps() >= 120, 60, f"the trainer did not reach step 120: {records()[-3:]}")
        first = pod()
        assert first is not None
        emu.preempt_gke_node(first["spec"]["nodeName"])  # type: ignore[index]
        # gcptui reads the pod ended by its node's shutdown as preempted (GKE's reason Terminated).
        until(
            lambda: any(r.state is State.PREEMPTED for r in backend.list_rows().rows),
            30,
            "never read preempted",
        )
        until(lambda: any(r.get("event") == "resumed" for r in records()), 60, f"no resume: {records()[-3:]}")
        until(
            lambda: any(r.get("event") == "finished" for r in records()),
            60,
            f"not finished: {records()[-3:]}",
        )
        replacement = pod()
        assert replacement is not None
        assert replacement["metadata"]["uid"] != first["metadata"]["uid"]  # type: ignore[index]
        row = next(r for r in backend.list_rows().rows if r.name == "trainer")
        assert row.state in (State.RUNNING, State.SUCCEEDED)  # the controller's new pod
    found = records()
    preempted = [r for r in found if r.get("event") == "preempted"]
    assert preempted and preempted[-1]["mirrored"] is True, "the SIGTERM save reached the bucket"
    resumed = [r for r in found if r.get("event") == "resumed"]
    assert resumed[0]["step"] == preempted[-1]["step"]  # 0 steps lost beyond the mirrored checkpoint
    losses: dict[int, float] = {}
    for record in found:  # no step logged twice with another value: the resumed run is the same run
        if "loss" in record and "event" not in record:
            step, loss = int(record["step"]), float(record["loss"])  # type: ignore[call-overload, arg-type]
            assert losses.setdefault(step, loss) == loss, f"step {step} logged twice with different losses"
    assert sorted(losses) == list(range(min(losses), STEPS + 1)) and min(losses) <= 1  # every step, once
