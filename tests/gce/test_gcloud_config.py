"""Project and zone resolution follows gcloud's own order, on temporary gcloud config dirs."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.cloud.gcloud_config import (
    active_configuration_name,
    gcloud_config_dir,
    project_sources,
    resolve_default_zone,
    resolve_project,
)


def _gcloud(tmp_path: Path, configs: dict[str, str], active: str | None = None) -> dict[str, str]:
    root = tmp_path / "gcloud"
    (root / "configurations").mkdir(parents=True)
    for name, text in configs.items():
        (root / "configurations" / f"config_{name}").write_text(text)
    if active is not None:
        (root / "active_config").write_text(active + "\n")
    return {"CLOUDSDK_CONFIG": str(root)}


def test_project_resolves_as_gcloud_does_then_google_cloud_project(tmp_path: Path) -> None:
    env = _gcloud(tmp_path, {"default": "[core]\nproject = from-config\n"})
    assert resolve_project({**env, "CLOUDSDK_CORE_PROJECT": "from-sdk-env"}) == "from-sdk-env"
    assert resolve_project(env) == "from-config"
    # gcloud ignores GOOGLE_CLOUD_PROJECT: so does gcptui while gcloud has a project, with a warning.
    project, warning = project_sources({**env, "GOOGLE_CLOUD_PROJECT": "from-env"})
    assert project == "from-config"
    assert warning is not None and "from-config" in warning and "from-env" in warning
    assert project_sources({**env, "GOOGLE_CLOUD_PROJECT": "from-config"}) == ("from-config", None)
    empty = _gcloud(tmp_path / "none", {})
    assert project_sources({**empty, "GOOGLE_CLOUD_PROJECT": "from-env"}) == ("from-env", None)


def test_active_config_file_selects_the_named_configuration(tmp_path: Path) -> None:
    env = _gcloud(
        tmp_path,
        {
            "default": "[core]\nproject = default-proj\n",
            "work": "[core]\nproject = work-proj\n[compute]\nzone = europe-west4-a\n",
        },
        active="work",
    )
    assert active_configuration_name(env) == "work"
    assert resolve_project(env) == "work-proj"
    assert resolve_default_zone(env) == "europe-west4-a"


def test_active_config_name_from_environment_overrides_the_file(tmp_path: Path) -> None:
    env = _gcloud(
        tmp_path, {"default": "[core]\nproject = a\n", "other": "[core]\nproject = b\n"}, active="default"
    )
    assert resolve_project({**env, "CLOUDSDK_ACTIVE_CONFIG_NAME": "other"}) == "b"


def test_zone_from_environment_wins(tmp_path: Path) -> None:
    env = _gcloud(tmp_path, {"default": "[compute]\nzone = us-central1-a\n"})
    assert resolve_default_zone({**env, "CLOUDSDK_COMPUTE_ZONE": "us-east4-a"}) == "us-east4-a"
    assert resolve_default_zone(env) == "us-central1-a"


def test_missing_or_broken_config_means_no_project(tmp_path: Path) -> None:
    assert resolve_project({"CLOUDSDK_CONFIG": str(tmp_path / "nothing")}) is None
    env = _gcloud(tmp_path, {"default": "this is not ini [\n"})
    assert resolve_project(env) is None and resolve_default_zone(env) is None
    assert active_configuration_name(env) == "default"


def test_default_config_dir_is_under_home(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", "/home/someone")
    assert gcloud_config_dir({}) == Path("/home/someone/.config/gcloud")
