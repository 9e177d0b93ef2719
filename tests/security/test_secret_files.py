"""Credentials never leave the laptop: the seven secret files of a project (the issue's) go neither to
a VM by sync, nor into `vertex submit`'s package, nor into the keeper's project copy; each route names
each held-back file once with the config key that lets it through, and sends the rest."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.keeper.deploy import DeployPlan, KeeperDeploy
from gcptui.remote.services import Services
from gcptui.remote.sync.events import SyncWarning
from gcptui.remote.sync.secrets import SecretGuard
from gcptui.remote.vertex_workflows import package

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAA=\n-----END OPENSSH PRIVATE KEY-----\n"
ADC = {
    "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
    "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
    "refresh_token": "1//0gExampleRefreshTokenValue-abcdefghijklmnop",
    "type": "authorized_user",
}
SECRETS = {
    ".env": "OPENAI_API_KEY=sk-live-0123456789\n",
    "sub/.env.production": "DATABASE_URL=postgres://app:hunter2@db/prod\n",
    "application_default_credentials.json": json.dumps(ADC, indent=2),
    ".netrc": "machine api.example.com login me password hunter2\n",
    "conf/credentials": "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG\n",
    ".git-credentials": "https://me:ghp_exampletoken0123456789@github.com\n",
    "docs/notes.txt": "plain notes\n" * 420 + KEY,  # the key starts past byte 5,000
}
PLAIN = {
    "train.py": "print('training')\n",
    "credentials.py": "def load(): ...\n",  # source code about credentials, not one
    ".env.example": "OPENAI_API_KEY=\n",
    "sub/data.txt": "x" * 200_000,  # large: not scanned
}


def _project(root: Path) -> Path:
    project = root / "project"
    for rel, text in {**SECRETS, **PLAIN}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    assert (project / "docs/notes.txt").read_text().index("-----BEGIN") > 5000
    return project


def _named_once(lines: list[str]) -> None:
    for rel in SECRETS:
        said = [line for line in lines if f" {rel} " in line]
        assert len(said) == 1, (rel, lines)
        assert "[sync].allow_secrets" in said[0], said[0]
    for rel in PLAIN:
        assert not [line for line in lines if f" {rel} " in line], (rel, lines)


def _holds(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


async def test_the_seven_secret_files_stay_on_the_laptop_by_every_route(
    emulator: Emulator, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    emulator.add_instance("box", "us-central1-a")
    await emulator.wait_for_status("box", "RUNNING")
    config_path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    config_path.write_text(config_path.read_text() + '\n[storage]\nbucket = "gs://runs"\n')
    config = load_config(str(config_path))
    services = Services(config)
    home = emulator.instance("box").disk / "home"  # type: ignore[operator]
    try:
        [box] = await services.resolve(["box"])

        # Live sync's full sync to a VM.
        said: list[str] = []
        session = services.sync_session(box)
        session.subscribe(lambda e: said.append(e.message) if isinstance(e, SyncWarning) else None)
        await session.full_sync()
        await session.close()
        assert _holds(home / "project") == set(PLAIN), _holds(home / "project")
        _named_once(said)

        # vertex submit's package: what it uploads to the bucket.
        told: list[str] = []
        with tarfile.open(fileobj=io.BytesIO(package(config, told.append))) as archive:
            names = {m.name for m in archive.getmembers() if m.isfile()}
        assert names == set(PLAIN), names
        _named_once(told)

        # The keeper's project copy, as keeper deploy makes it.
        lines: list[str] = []
        deploy = KeeperDeploy(services, DeployPlan("keeper", "us-central1-a", "e2-small", True), lines.append)
        await deploy._project(box, str(home))
        assert _holds(home / ".gcptui-keeper" / "project") == set(PLAIN)
        _named_once(lines)
    finally:
        await services.close()


def test_allow_secrets_patterns_let_the_named_files_through(tmp_path: Path) -> None:
    guard = SecretGuard(allow=["sub/.env.*", "*.pem"])
    assert guard.by_name("sub/.env.production") is None and guard.by_name("keys/deploy.pem") is None
    assert guard.by_name(".env") == "is an environment file (.env*)"
    assert guard.by_name("x/.config/gcloud/configurations/config_default") is not None
    assert guard.by_name("home/.aws/config") is not None and guard.by_name("a/.kube/cache/x") is not None
    kubeconfig = b"apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: abc.def\n"
    assert (
        guard.by_content("kube.yaml", kubeconfig, len(kubeconfig)) == "is a kubeconfig holding a credential"
    )
    plain_kube = b"apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    exec: {command: gke-gcloud-auth-plugin}\n"
    assert guard.by_content("kube.yaml", plain_kube, len(plain_kube)) is None
    account = b'{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE\\n"}'
    assert guard.by_content("sa.json", account, len(account)) == "is a Google service account key"
