"""Transactional tests end with a flush (one TRUNCATE of every table). A real worker process
that is still running a cycle can hold a lock the TRUNCATE needs while it waits for one the
TRUNCATE already holds: PostgreSQL then aborts one of the two with "deadlock detected". When it
aborts the flush, nothing was truncated (the statement rolled back), so the flush is simply run
again once the worker's transaction has ended."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from django.test import TransactionTestCase

T = TypeVar("T")

ATTEMPTS = 6
DEADLOCK = "40P01"  # SQLSTATE deadlock_detected


def is_deadlock(exc: BaseException) -> bool:
    """Whether `exc` or an exception it was raised from is PostgreSQL's deadlock error
    (the flush command wraps it in a CommandError, Django's cursor in an OperationalError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if code == DEADLOCK:
            return True
        current = current.__cause__ or current.__context__
    return False


def retry_on_deadlock(fn: Callable[[], T], attempts: int = ATTEMPTS,
                      on_retry: Callable[[BaseException], None] | None = None) -> T:
    """Run `fn`; run it again (up to `attempts` times in all, with a short pause growing each
    time) when it failed with a deadlock; any other error, or the last deadlock, is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not is_deadlock(exc):
                raise
            if on_retry is not None:
                on_retry(exc)
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")


_plain_teardown = TransactionTestCase._fixture_teardown


def _teardown_retrying(self: TransactionTestCase) -> None:
    retry_on_deadlock(lambda: _plain_teardown(self))


def install() -> None:
    """Make every transactional test's closing flush retry after a deadlock."""
    TransactionTestCase._fixture_teardown = _teardown_retrying  # type: ignore[method-assign]
