"""The keeper's ``gcptui.toml``: the laptop's, with every local path rewritten for the keeper VM.

What the keeper gets: the project, zones, ``[storage]``, ``[keepalive]``, ``[notify]``, ``[job]``,
``[sync]`` (its source: the tree copied at deploy time), ``[[groups]]``, and every kind of compute's
section (a Kubernetes cluster's when named by its resource, reached with the keeper's own Google
identity): so that a lease the keeper holds never leaves a row nobody recovers. What it never gets:
user credentials. ``[gcp] access_token_file`` travels only for a loopback endpoint (the
emulator's token, no Google credential): on a real project the VM's service account answers through
the metadata server. ``[ssh] key`` is the keeper's own key, made on the VM; ``proxy_command`` is
dropped (the keeper sits inside the VPC); ``[[hosts]]`` (keys of the user's own machines) and the
clusters reached through a kubeconfig context (the user's credentials) are left out.
"""

from __future__ import annotations

from typing import Any

import tomlkit

from gcptui.remote.cloud.auth import is_local_endpoint

DROPPED_SECTIONS = ("hosts", "keys")


def keeper_config(text: str, home: str, *, token: bool) -> str:
    """The keeper's config from the laptop's ``text``; ``home`` is the keeper VM's home folder;
    ``token``: a token file was copied to ``~/.gcptui-keeper/token`` (the emulator)."""
    doc: Any = tomlkit.parse(text)
    keeper_dir = f"{home}/.gcptui-keeper"
    for section in DROPPED_SECTIONS:
        doc.pop(section, None)
    clusters = doc.get("gke")
    if clusters is not None:
        kept = [entry for entry in clusters if entry.get("cluster")]  # a kubeconfig context: the user's
        doc.pop("gke")
        if kept:
            doc["gke"] = tomlkit.aot()
            doc["gke"].extend(kept)
    gcp = doc.get("gcp")
    if gcp is not None:
        gcp.pop("access_token_file", None)
        if token:
            gcp["access_token_file"] = f"{keeper_dir}/token"
    ssh = doc.setdefault("ssh", tomlkit.table())
    ssh["key"] = f"{keeper_dir}/id_ed25519"
    ssh["known_hosts"] = f"{keeper_dir}/known_hosts"
    ssh.pop("proxy_command", None)
    sync = doc.setdefault("sync", tomlkit.table())
    sync["source"] = f"{keeper_dir}/project"
    return tomlkit.dumps(doc)


def travels_token(api_endpoint: str) -> bool:
    """Whether ``[gcp] access_token_file`` may be copied: only the emulator's (a loopback endpoint)."""
    return bool(api_endpoint) and is_local_endpoint(api_endpoint)
