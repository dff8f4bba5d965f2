"""Gunicorn's threaded worker, taking a new connection only while it holds no more connections
than the least loaded of its sibling processes.

Gunicorn's processes share one listening socket, and the stock threaded worker accepts every
connection it is woken for. Clients that keep their connection open (API clients, and any
proxy's upstream pool) stay wherever that race put them: with 200 keep-alive clients on 2
processes, 139 connections were on one and 61 on the other. Each process has one core's
worth of interpreter, so the crowded one answered its clients about twice as slowly, and that
half set the tail (`bench.portal`, 200 clients with the workers scheduling: p50 563-650 ms,
p99 0.93-1.3 s at 330-390 requests/s).

Here the processes publish how many connections each holds in a small shared table (created
when gunicorn's master imports this module, inherited by the processes it forks; each process
claims a free slot as it starts), and a process listens only while it holds at most one more
than the least loaded sibling that is listening. A connection arriving meanwhile waits in the
kernel's backlog for a sibling, and a process that is not listening looks again every
`RECHECK_S`, so a new connection waits at most that long for one to take it. Requests on
connections a process already holds are not affected. A process that leaves (stopped, or
killed: the master's `child_exit` hook, in gunicorn.conf.py) is forgotten at once; where the
table was not inherited or is full, a process sees no sibling and accepts as the stock worker
does.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

SLOTS = 256  # processes alive at once that share the table; more take connections as usual
RECHECK_S = 0.02
IDLE = -1  # the slot's count while its process is not taking connections
# Per slot: the process's pid (0: free) and its connection count (IDLE: not listening);
# slots are claimed lowest first, so the ones in use stay below `_HIGH`.
try:  # shared memory (a file in /dev/shm or the temporary directory) and a POSIX semaphore
    _PIDS = multiprocessing.RawArray("q", SLOTS)
    _CONNS = multiprocessing.RawArray("q", SLOTS)
    _HIGH = multiprocessing.RawValue("q", 0)
    _CLAIM: Any = multiprocessing.Lock()
except OSError:  # neither here: each process accepts on its own, as the stock worker does
    logging.getLogger(__name__).warning("no shared memory: connections are not balanced",
                                        exc_info=True)
    _PIDS, _CONNS = (ctypes.c_longlong * SLOTS)(), (ctypes.c_longlong * SLOTS)()
    _HIGH, _CLAIM = ctypes.c_longlong(0), None


def claim(pid: int) -> int | None:
    """A free slot for the process `pid`; None when the table is full (or its lock is held by a
    process killed while claiming: it then takes connections as the stock worker does)."""
    if _CLAIM is None or not _CLAIM.acquire(timeout=1.0):
        return None
    try:
        for slot in range(SLOTS):
            if _PIDS[slot] == 0:
                _CONNS[slot] = IDLE
                _PIDS[slot] = pid
                _HIGH.value = max(_HIGH.value, slot + 1)
                return slot
        return None
    finally:
        _CLAIM.release()


def release(pid: int) -> None:
    """Forget the process `pid` (it has left): the master's `child_exit` hook, and the process
    itself as it stops."""
    for slot in range(_HIGH.value):
        if _PIDS[slot] == pid:
            _CONNS[slot] = IDLE
            _PIDS[slot] = 0


def least_loaded(own: int | None) -> int | None:
    """The fewest connections held by a listening process other than the slot `own`; None
    when no other process listens."""
    high = _HIGH.value
    pids, conns = _PIDS[:high], _CONNS[:high]
    counts = [c for i, c in enumerate(conns) if pids[i] and c != IDLE and i != own]
    return min(counts) if counts else None


class BalancedThreadWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn has no type hints
    """`ThreadWorker` that listens only while it is among the least loaded (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slot: int | None = None
        self._wanted = False  # what gunicorn's loop asks for (alive, under its connection limit)

    def init_process(self) -> None:
        self.slot = claim(os.getpid())
        super().init_process()

    def _publish(self) -> None:
        if self.slot is not None:
            _CONNS[self.slot] = self.nr_conns if self._wanted and self.alive else IDLE

    def _balanced(self) -> bool:
        least = least_loaded(self.slot)
        return least is None or self.nr_conns <= least + 1

    def set_accept_enabled(self, enabled: bool) -> None:
        self._wanted = enabled
        self._publish()
        super().set_accept_enabled(enabled and self._balanced())

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        if self._wanted and not self._accepting:
            timeout = min(timeout, RECHECK_S)  # look again soon whether a sibling took over
        super().wait_for_and_dispatch_events(timeout)
        self._publish()
        if self._wanted and self.alive:
            super().set_accept_enabled(self._balanced())

    def run(self) -> None:
        try:
            super().run()
        finally:
            release(os.getpid())
