"""The scheduling code's locks, and their keys.

One cycle at a time across every worker and machine: `scheduling_lock` takes a
transaction-level advisory lock (the try form for the cycle, which skips when another holds
it; the blocking form for the workers' other writers of workload states: sync, dispatch
refusals, maintenance, and for updates). A cancel does not take it (`workload_writer`). On
SQLite (`make run` without DATABASE_URL) a file lock under var/ plays the same part (core.db).
Dispatch and watch passes take session-level locks per cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import transaction

from core import db

LOCK_KEY = 0x616C6C6F74  # "allot": one advisory lock id for every writer of workload states


@contextlib.contextmanager
def scheduling_lock(*, wait: bool) -> Iterator[bool]:
    """A transaction holding the scheduling lock; yields False (no transaction work should be
    done) when `wait` is False and another process holds it."""
    with db.xact_lock(LOCK_KEY, wait=wait, name="scheduling.lock") as got:
        yield got


@contextlib.contextmanager
def workload_writer() -> Iterator[None]:
    """A transaction for a user's action on one workload (a cancel), which must win over a
    cycle in flight without waiting for its engine.

    On PostgreSQL a plain transaction: the action locks its row, and the cycle locks and reads
    again the rows its decisions change before writing them, dropping a decision whose
    workload moved (compare-and-set, scheduling/workers/cycle.py): the action waits at most
    for the cycle's writes to that row. Elsewhere (SQLite: one writer at a time, whose reads
    are not locked) the scheduling lock, waited for.
    """
    if db.postgres():
        with transaction.atomic():
            yield
    else:
        with scheduling_lock(wait=True):
            yield


DISPATCH_LOCK_BASE = LOCK_KEY + 1000  # + cluster id x 64 + shard
DISPATCH_SHARDS = 4


@contextlib.contextmanager
def cluster_lock(cluster_id: int, shard: int, *, wait: bool = False) -> Iterator[bool]:
    """One writer of a shard of a cluster's objects at a time: dispatch passes and deletions
    (PostgreSQL; elsewhere always granted). A workload always falls in the shard
    `id % DISPATCH_SHARDS`, so several passes dispatch to one cluster in parallel while the
    objects of one workload still have one writer at a time.

    Deletions wait for it so an old interval's delete never lands after a new interval's
    create of the same Job names. A session-level advisory lock, so no transaction stays open
    while we talk to the cluster; a dispatch pass that finds it taken skips (the holder, or the
    next beat, does the work).
    """
    with cluster_locks(cluster_id, [shard], wait=wait) as held:
        yield bool(held)


def _lock_key(cluster_id: int, shard: int) -> int:
    return DISPATCH_LOCK_BASE + int(cluster_id) * 64 + int(shard)


@contextlib.contextmanager
def cluster_locks(cluster_id: int, shards: list[int], *, wait: bool = False,
                  wait_s: float | None = None) -> Iterator[list[int]]:
    """The shard locks of `cluster_lock` for several shards; yields the shards held (see
    `core.db.session_locks` for waiting)."""
    keys = {_lock_key(cluster_id, s): s for s in shards}
    with db.session_locks(list(keys), wait=wait, wait_s=wait_s) as held:
        yield [keys[k] for k in held]


WATCH_LOCK_BASE = LOCK_KEY + 500_000  # + cluster id: one watcher per cluster


def watch_lock(cluster_id: int) -> contextlib.AbstractContextManager[bool]:
    """One watcher per cluster across every worker: yields whether this one may watch."""
    return db.session_lock(WATCH_LOCK_BASE + int(cluster_id))
