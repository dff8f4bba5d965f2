"""What every command gets: its arguments, the configuration, the output format and the API."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from allot_cli import config
from allot_cli.client import Api


@dataclass
class Context:
    """One run of `allot`."""

    args: argparse.Namespace
    _settings: config.Config | None = None
    _api: Api | None = None

    @property
    def settings(self) -> config.Config:
        """The configuration file's contents (read when first needed)."""
        if self._settings is None:
            self._settings = config.load()
        return self._settings

    @property
    def output(self) -> str:
        """`table`, `json` or `yaml`."""
        return str(getattr(self.args, "output", None) or "table")

    def target(self) -> config.Target:
        """The server and token this run uses (docs/cli.md, "Which server")."""
        return config.resolve(getattr(self.args, "server", None), self.settings)

    def api(self) -> Api:
        """The API client for the server this run talks to."""
        if self._api is None:
            self._api = Api(self.target(), timeout=float(getattr(self.args, "timeout", 30)))
        return self._api
