"""A user action racing a scheduling cycle: the cycle runs in a thread and is held between its
engine and its writes (the `after_snapshot` hook) while the action runs in another thread."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connection

from scheduling.workers.cycle import cycle_run


def in_thread(fn: Callable[[], Any], out: list[Any]) -> threading.Thread:
    """Run `fn` in a thread with its own connection; its result, or the exception it raised,
    goes to `out`."""
    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:
            out.append(exc)
        finally:
            connection.close()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@contextlib.contextmanager
def cycle_held(check: Callable[[Any, Any], None] | None = None) -> Iterator[list[Any]]:
    """A cycle that has read the database and decided (`check(snapshot, result)` sees its
    decisions), held before its writes while the block runs; then it writes and ends. Yields
    the list its report goes to."""
    decided, resume = threading.Event(), threading.Event()

    def between_engine_and_writes(snapshot: Any, result: Any) -> None:
        try:
            if check is not None:
                check(snapshot, result)
        finally:
            decided.set()
        resume.wait(20)

    reports: list[Any] = []
    cycle = in_thread(lambda: cycle_run(wait=True, after_snapshot=between_engine_and_writes),
                      reports)
    assert decided.wait(20), "the cycle did not reach its writes"
    try:
        yield reports
    finally:
        resume.set()
        cycle.join(20)
    assert reports and not isinstance(reports[0], Exception), reports
