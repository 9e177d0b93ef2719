"""The keeper's config keeps every section keep-alive needs to recover what the lease makes it own
(``[tpu]``, ``[vertex]``, the ``[[gke]]`` clusters named by resource) and never the user's credentials."""

from __future__ import annotations

import tomllib

from gcptui.remote.keeper.vm_config import keeper_config

LAPTOP = """
[gcp]
project = "proj-12345"
[tpu]
zones = ["us-central2-b"]
[vertex]
region = "us-central1"
[[gke]]
cluster = "projects/proj-12345/locations/us-central1/clusters/train"
[[gke]]
context = "laptop-ctx"
kubeconfig = "/home/me/.kube/config"
[[hosts]]
name = "box"
address = "10.0.0.2"
"""


def test_the_keeper_keeps_tpu_vertex_and_gke_clusters_and_drops_kubeconfigs_and_hosts() -> None:
    kept = tomllib.loads(keeper_config(LAPTOP, "/home/keeper", token=False))
    assert kept["tpu"] == {"zones": ["us-central2-b"]}
    assert kept["vertex"] == {"region": "us-central1"}
    assert kept["gke"] == [{"cluster": "projects/proj-12345/locations/us-central1/clusters/train"}]
    assert "hosts" not in kept
    assert "kubeconfig" not in keeper_config(LAPTOP, "/home/keeper", token=False)


def test_a_config_whose_only_clusters_are_kubeconfig_contexts_has_no_gke_section_left() -> None:
    only = '[gcp]\nproject = "proj-12345"\n[[gke]]\ncontext = "c"\n'
    assert "gke" not in tomllib.loads(keeper_config(only, "/home/keeper", token=False))
