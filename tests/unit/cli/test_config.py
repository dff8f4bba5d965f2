"""allot_cli.config: the file (its place, mode 0600, TOML that reads back), and which server
and token a command uses (flag, environment, file; the file's token for its own server only)."""

from __future__ import annotations

import os
import stat
import tomllib

import pytest

from allot_cli import config
from allot_cli.config import Config, load, resolve, save
from allot_cli.errors import CliError, Exit


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    for name in ("ALLOT_CONFIG", "ALLOT_SERVER", "ALLOT_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_where_the_file_is(monkeypatch, tmp_path):
    assert config.config_path() == tmp_path / "home" / ".config" / "allot" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config.config_path() == tmp_path / "xdg" / "allot" / "config.toml"
    monkeypatch.setenv("ALLOT_CONFIG", str(tmp_path / "mine.toml"))
    assert config.config_path() == tmp_path / "mine.toml"


def test_saved_private_and_read_back(tmp_path):
    path = tmp_path / "d" / "config.toml"
    old = os.umask(0)  # even with a permissive umask
    try:
        save(Config(server="https://a.example", token='to"ken\\\u00e9\U0001f600',
                    username="alice"), path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert tomllib.loads(path.read_text())["token"] == 'to"ken\\\u00e9\U0001f600'
    assert load(path) == Config(server="https://a.example", token='to"ken\\\u00e9\U0001f600',
                                username="alice")
    assert not [p for p in path.parent.iterdir() if p.name != "config.toml"]  # no temp file


def test_missing_file_is_empty_and_a_broken_one_is_named(tmp_path, capsys):
    assert load(tmp_path / "none.toml") == Config()
    bad = tmp_path / "bad.toml"
    bad.write_text("server = \n")
    bad.chmod(0o600)
    with pytest.raises(CliError) as caught:
        load(bad)
    assert caught.value.code == Exit.USAGE and "bad.toml is not valid TOML" in \
        caught.value.message
    loose = tmp_path / "loose.toml"
    loose.write_text('server = "https://a.example"\n')
    loose.chmod(0o644)
    assert load(loose).server == "https://a.example"
    assert f"run: chmod 600 {loose}" in capsys.readouterr().err


def test_server_flag_then_environment_then_file(monkeypatch):
    saved = Config(server="https://saved.example/", token="t-saved")
    assert resolve(None, saved) == config.Target("https://saved.example", "t-saved")
    monkeypatch.setenv("ALLOT_SERVER", "https://env.example")
    # Another server: the saved token is never sent to it.
    assert resolve(None, saved) == config.Target("https://env.example", None)
    assert resolve("https://flag.example", saved).server == "https://flag.example"
    monkeypatch.setenv("ALLOT_TOKEN", "t-env")
    assert resolve("https://saved.example", saved) == config.Target("https://saved.example",
                                                                    "t-env")


@pytest.mark.parametrize("url", ["allot.example.org", "ftp://x", "http://", ""])
def test_a_server_that_is_no_url_is_a_usage_error(url):
    with pytest.raises(CliError) as caught:
        resolve(url or None, Config())
    assert caught.value.code == Exit.USAGE
    assert ("is not an http:// or https:// URL" in caught.value.message
            or "no server" in caught.value.message)
