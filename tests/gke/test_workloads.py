"""Pure logic: the pods and workloads a cluster's API server answers (which a pod's service account
may be allowed to write) are read totally; the emulator's selectors parse as the API server's do."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gcptui.remote.compute.gke.states import pod_state
from gcptui.remote.compute.gke.workloads import workload_rows
from gcptui.remote.emulator.gke.selectors import SelectorError, field_selector, label_selector
from gcptui.remote.models import State

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "metadata",
                    "name",
                    "labels",
                    "status",
                    "phase",
                    "spec",
                    "nodeName",
                    "ownerReferences",
                    "controller",
                    "kind",
                    "containerStatuses",
                    "restartCount",
                    "conditions",
                    "type",
                    "reason",
                    "containers",
                    "resources",
                    "limits",
                    "nvidia.com/gpu",
                    "deletionTimestamp",
                    "uid",
                    "podIP",
                ]
            ),
            inner,
            max_size=6,
        )
    ),  # fmt: skip
    max_leaves=30,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(JSON, max_size=4), st.lists(JSON, max_size=4), st.lists(JSON, max_size=3))
def test_workload_rows_are_total(pods: list[Any], sets: list[Any], nodes: list[Any]) -> None:
    objects = {
        "Pod": [p for p in pods if isinstance(p, dict)],
        "StatefulSet": [s for s in sets if isinstance(s, dict)],
    }
    for row in workload_rows(objects, [n for n in nodes if isinstance(n, dict)], "us-central1-a", "c"):
        assert row.source == "gke" and isinstance(row.state, State)


def _pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "status": {"phase": phase, **status}}


def test_pod_states() -> None:
    assert pod_state(_pod("Pending")) is State.PROVISIONING
    assert pod_state(_pod("Running")) is State.RUNNING
    assert pod_state(_pod("Failed", reason="Terminated")) is State.PREEMPTED
    assert (
        pod_state(_pod("Failed", conditions=[{"type": "DisruptionTarget", "status": "True"}]))
        is State.PREEMPTED
    )
    assert pod_state(_pod("Failed", reason="Error")) is State.FAILED
    assert (
        pod_state({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}}) is State.DELETING
    )


def test_selectors() -> None:
    pod = {
        "metadata": {"name": "a", "namespace": "default", "labels": {"app": "x", "tier": "gpu"}},
        "spec": {"nodeName": "n1"},
    }
    assert label_selector("app=x,tier in (gpu, cpu),!missing")(pod)
    assert not label_selector("app!=x")(pod) and not label_selector("tier notin (gpu)")(pod)
    assert label_selector("")(pod) and field_selector("spec.nodeName=n1,metadata.name!=b")(pod)
    for bad, parse in (
        ("app in (x", label_selector),
        ("spec.color=red", field_selector),
        ("=x", label_selector),
    ):
        with pytest.raises(SelectorError):
            parse(bad)
