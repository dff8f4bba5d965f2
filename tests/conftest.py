"""Shared fixtures."""

import pytest

from tests import flush

flush.install()


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache (the sign-in limit's counters)."""
    from django.core.cache import cache

    cache.clear()
