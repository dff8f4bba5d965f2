"""Shared fixtures."""

from tests import flush

flush.install()
