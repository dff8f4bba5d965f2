"""The engine's records and helpers: the pods-ready backoff."""

from __future__ import annotations


def test_backoff_delay_caps() -> None:
    from scheduling.engine import Settings, backoff_delay
    s = Settings()
    assert [backoff_delay(s, n) for n in (1, 2, 3, 7, 8, 20)] == [60, 120, 240, 3600, 3600, 3600]
