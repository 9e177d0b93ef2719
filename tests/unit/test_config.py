"""Config validation: each mistake is one line naming the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.config import load_config, parse_config
from gcptui.remote.errors import ConfigError

FULL = """
[gcp]
project = "my-project"
zones = ["us-central1-a", "europe-west4-b"]
api_endpoint = "http://127.0.0.1:8085"

[ssh]
user = "alice"
proxy_command = "gcloud compute start-iap-tunnel {name} {port} --listen-on-stdin --zone {zone}"

[[hosts]]
name = "box"
address = "127.0.0.1"
port = 2222

[sync]
source = "."
dest = "~/project"
exclude = ["data/"]
protect = ["runs/", "checkpoints/"]

[job]
setup = "pip install -r requirements.txt"
command = "python -m gcptui_trainer --run-dir runs/a --steps 1000"
env = { CUDA_VISIBLE_DEVICES = "0" }
stop_grace_seconds = 10

[keepalive]
enabled = true
poll_seconds = 5
max_restarts = 3
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gcptui.toml"
    path.write_text(text)
    return path


def test_full_design_config_is_accepted(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL))
    assert config.gcp is not None and config.gcp.project == "my-project"
    assert config.hosts[0].port == 2222
    assert config.job.resume_command == config.job.command
    assert config.keepalive.max_restarts == 3
    assert config.sync.protect == ["runs/", "checkpoints/"]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("[ssh]\nuser = 'a'\nusr = 'b'\n", 3, "unknown key 'ssh.usr'"),
        ("[gcp]\nproject = ''\n", 2, "'gcp.project' is empty"),
        (
            "[[hosts]]\nname = 'a'\naddress = 'x'\n[[hosts]]\nname = 'b'\naddress = 'y'\nport = 0\n",
            7,
            "hosts[1].port",
        ),
        ("[sync]\ndest = '/'\n", 2, "'sync.dest'"),
        ("[sync]\ndest = '~'\n", 2, "whole remote root or home"),
        ("[keepalive]\npoll_seconds = 'soon'\n", 2, "keepalive.poll_seconds"),
        ("colour = 'blue'\n", 1, "unknown key 'colour'"),
    ],
)
def test_bad_values_name_file_line_and_key(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}:"), message
    assert fragment in message
    assert caught.value.exit_code == 2


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_config("[gcp\n", tmp_path / "x.toml")


def test_missing_explicit_config_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml")


def test_no_config_anywhere_means_gce_with_ambient_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = load_config(None)
    assert config.gcp is not None and config.gcp.project is None
    assert config.path is None


def test_duplicate_host_names_are_refused(tmp_path: Path) -> None:
    text = "[[hosts]]\nname = 'a'\naddress = 'x'\n[[hosts]]\nname = 'a'\naddress = 'y'\n"
    with pytest.raises(ConfigError, match="appears twice"):
        load_config(write(tmp_path, text))


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[sync]\nsource = 'src'\n"))
    assert config.resolve_local(config.sync.source) == tmp_path / "src"


def test_a_typo_is_named_before_the_key_it_left_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config('[[hosts]]\nnme = "a"\naddress = "b"\n', tmp_path / "gcptui.toml")
    assert "unknown key 'hosts[0].nme'" in str(caught.value) and "gcptui.toml:2" in str(caught.value)


def test_path_is_not_a_key_of_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gcptui.toml:2: unknown key 'path'"):
        parse_config('# mine\npath = "x"\n', tmp_path / "gcptui.toml")


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gcptui.toml"
    config.write_bytes(b'[gcp]\nproject = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(config)


def test_a_sweep_file_that_is_not_utf8_or_has_a_typo_is_one_line(tmp_path: Path) -> None:
    from gcptui.remote.sweep.spec import load_sweep, parse_sweep

    sweep = tmp_path / "sweep.toml"
    sweep.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_sweep(sweep)
    with pytest.raises(ConfigError, match="unknown key 'nmae'"):
        parse_sweep('nmae = "s"\n', sweep)


def test_an_unknown_key_names_the_keys_its_section_takes_not_a_doc_a_pip_user_lacks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("[job]\ncomand = 'python train.py'\n", tmp_path / "typo.toml")
    said = str(caught.value)
    assert "typo.toml:2: unknown key 'job.comand'" in said
    assert "did you mean 'command'?" in said and "[job] takes: command, env, resume" in said
    assert "REFERENCE" not in said and "docs/" not in said


@pytest.mark.parametrize(
    ("text", "line", "said"),
    [
        (
            '[keepalive]\nenabled = "yes"\n',
            2,
            "'keepalive.enabled' must be true or false, not the string \"yes\": write enabled = true",
        ),
        (
            "[ssh]\nuser = 'a'\nport = \"50407\"\n",
            3,
            "'ssh.port' must be a number, not the string \"50407\": write port = 50407 (no quotes)",
        ),
        (
            "[keepalive]\nmax_restarts = 2.5\n",
            2,
            "'keepalive.max_restarts' must be a whole number, not 2.5: write max_restarts = 2",
        ),
        (
            "[keepalive]\nrestart_idle = 1\n",
            2,
            "'keepalive.restart_idle' must be true or false, not 1: write restart_idle = true",
        ),
        (
            '[ssh]\nconnect_timeout = "10"\n',
            2,
            "'ssh.connect_timeout' must be a number, not the string \"10\": write connect_timeout = 10 (no quotes)",
        ),
        (
            "[[hosts]]\nname = 'a'\naddress = 'x'\nport = 'ssh'\n",
            4,
            "'hosts[0].port' must be a number, not the string \"ssh\": write a whole number, without quotes",
        ),
    ],
)
def test_a_string_where_a_bool_or_a_number_belongs_is_one_line_saying_what_to_write(
    tmp_path: Path, text: str, line: int, said: str
) -> None:
    """TOML has booleans and numbers: `enabled = "yes"` or `port = "50407"` was taken silently (the
    string read as true, the port converted); a typo of type is now named, with the line to write."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}:{line}: {said}"
    assert caught.value.exit_code == 2


def test_numbers_and_booleans_written_as_toml_values_still_load(tmp_path: Path) -> None:
    text = "[ssh]\nport = 2222\nconnect_timeout = 5\n[keepalive]\nenabled = false\npoll_seconds = 2\nmax_restarts = 4\n"
    config = load_config(write(tmp_path, text))
    assert (config.ssh.port, config.ssh.connect_timeout) == (2222, 5.0)
    assert (config.keepalive.enabled, config.keepalive.poll_seconds, config.keepalive.max_restarts) == (
        False,
        2.0,
        4,
    )
