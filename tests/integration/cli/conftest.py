"""The command line against a running portal: pytest-django's live server (a real HTTP
server in a thread, on the test database) with the portal tests' organisation, and `cli`,
which runs `allot` with arguments as a user would and returns its exit code and output."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass

import pytest

from allot_cli.main import main
from portal.services import api_token_create

# The organisation of tests/integration/portal/conftest.py: rd -> vision (alice, bob lead),
# nlp (carol); a100-80g: rd min 32 max 64, vision and nlp min 8 max 32; cluster bj, 32 GPUs.
from tests.integration.portal.conftest import org, priority_classes  # noqa: F401


@dataclass
class Ran:
    """One run of `allot`."""

    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _no_nudges(monkeypatch):
    # The tests run the scheduling cycle themselves; a submission's or a cancel's nudge
    # would otherwise be published to a broker no worker reads.
    from scheduling import enqueue

    for name in ("cycle_nudge", "cycle_nudge_at", "outbox_nudge"):
        monkeypatch.setattr(enqueue, name, lambda *a, **k: None)


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    """Where this test's `allot` keeps its configuration (never the developer's)."""
    path = tmp_path / "allot" / "config.toml"
    monkeypatch.setenv("ALLOT_CONFIG", str(path))
    for name in ("ALLOT_SERVER", "ALLOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def cli(live_server, config_file, capsys, monkeypatch):
    """cli("list", "-o", "json", token=raw, stdin="...") -> Ran, against the live server
    (`--server` is added unless `server=None`)."""

    def run(*args: str, token: str | None = None, stdin: str = "",
            server: str | None = live_server.url) -> Ran:
        capsys.readouterr()
        if token is None:
            monkeypatch.delenv("ALLOT_TOKEN", raising=False)
        else:
            monkeypatch.setenv("ALLOT_TOKEN", token)
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        argv = [*args, "--server", server] if server else list(args)
        code = main(argv)
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


@pytest.fixture
def tokens(org):  # noqa: F811
    """A write token for each of the organisation's users, by username."""
    return {u.username: api_token_create(user=u)[1]
            for u in (org.alice, org.bob, org.carol, org.admin)}
