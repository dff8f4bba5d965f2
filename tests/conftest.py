"""Shared fixtures."""

import pytest

from tests import flush

flush.install()


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache (the sign-in limit's counters)."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _empty_row_cache():
    """Each test starts with an empty per-process cache of workload rows (a flushed database
    may give a new workload the id of one an earlier test cached)."""
    from scheduling.workers import rows

    rows._static.items.clear()
