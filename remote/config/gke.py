"""``[[gke]]``: Kubernetes clusters whose training workloads (StatefulSets, Jobs, bare pods) join the fleet."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from gcptui.remote.config.base import _Section

_CLUSTER = re.compile(
    r"projects/([a-z][-a-z0-9]{4,28}[a-z0-9])/locations/([a-z]+-[a-z]+[0-9]+(?:-[a-z])?)/clusters/([a-z]([-a-z0-9]{0,38}[a-z0-9])?)"
)
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class GkeConfig(_Section):
    """One cluster: a GKE cluster by resource name (endpoint and CA from the Container API, a Google
    access token as the bearer token), or any Kubernetes cluster by kubeconfig context."""

    cluster: str = Field(
        default="",
        description="A GKE cluster: `projects/P/locations/L/clusters/NAME` (credentials through Google, as `[gcp]`'s).",
    )
    context: str = Field(
        default="", description="Or a kubeconfig context (any Kubernetes cluster, e.g. `gke_P_L_NAME`)."
    )
    kubeconfig: str = Field(
        default="",
        description="The kubeconfig `context` is read from. Empty: `$KUBECONFIG`, then `~/.kube/config`.",
    )
    namespace: str = Field(default="default", description="The namespace whose workloads are listed.")
    selector: str = Field(
        default="",
        description="Label selector of the training workloads (e.g. `team=ml`). Empty: all of them.",
    )

    @field_validator("cluster")
    @classmethod
    def _cluster_is_a_resource_name(cls, value: str) -> str:
        if value and not _CLUSTER.fullmatch(value):
            raise ValueError(f"{value!r} is not a cluster: write it as projects/P/locations/L/clusters/NAME")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_is_a_label(cls, value: str) -> str:
        if not _NAMESPACE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a namespace name (lowercase letters, digits, '-', at most 63)"
            )
        return value

    @model_validator(mode="after")
    def _one_way_in(self) -> GkeConfig:
        if bool(self.cluster) == bool(self.context):
            raise ValueError(
                "a [[gke]] entry names either `cluster` (a GKE cluster) or `context` (a kubeconfig context), one of them"
            )
        return self

    @property
    def label(self) -> str:
        """How rows and errors name the cluster: the GKE cluster's name, else the context."""
        return self.cluster.rsplit("/", 1)[-1] if self.cluster else self.context
