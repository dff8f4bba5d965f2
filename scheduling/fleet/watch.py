"""Following clusters by watch: one watcher per cluster across every worker, applying status
changes as they come, and the node inventory (capacity, labels, health).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from scheduling import enqueue
from scheduling.backends import registry
from scheduling.backends.base import (
    BackendError,
)
from scheduling.fleet.refs import (
    _setting,
)
from scheduling.fleet.sync import cluster_sync
from scheduling.locks import (
    watch_lock,
)
from scheduling.models import (
    Cluster,
    WorkloadState,
)

logger = logging.getLogger(__name__)
S = WorkloadState


@dataclass
class WatchReport:
    """What one watch session saw and did."""

    watched: bool = False  # False: another process watches this cluster
    rounds: int = 0
    resyncs: int = 0
    running: int = 0
    ended: int = 0


def watch_interval_s() -> float:
    """The shortest time between two looks at a busy cluster (batches the changes)."""
    return _setting("watch_interval_s")


def cluster_watch(*, cluster_id: int, seconds: float,
                  on_freed: Any = None) -> WatchReport:
    """Follow one cluster by watch for `seconds`: sync the workloads the backend says changed,
    as soon as it says so; resync everything at the start and when the bookmark expired.

    One watcher per cluster across every worker (a session advisory lock on PostgreSQL; a
    second caller returns at once with `watched` False). `on_freed()` is called when
    finished, failed or lost workloads released capacity (the workers run the cycle then).
    The periodic full sync (`sync_all`) stays as the fallback.
    """
    report = WatchReport()
    with watch_lock(cluster_id) as got:
        if not got:
            return report
        report.watched = True
        cluster = Cluster.objects.get(pk=cluster_id)
        backend = registry.get_backend(cluster)
        deadline = time.monotonic() + seconds
        bookmark = ""
        while (left := deadline - time.monotonic()) > 0:
            began = time.monotonic()
            try:
                if not bookmark:
                    bookmark = backend.watch_workloads(timeout_s=0).resource_version
                    synced = cluster_sync(cluster_id=cluster_id, nodes=False, nudge=False)
                    report.resyncs += 1
                else:
                    seen = backend.watch_workloads(timeout_s=min(left, 5.0),
                                                   resource_version=bookmark)
                    bookmark = "" if seen.expired else seen.resource_version
                    if seen.expired or not seen.changed:
                        continue
                    synced = cluster_sync(cluster_id=cluster_id, nodes=False, nudge=False,
                                          workload_ids=seen.changed)
            except BackendError as exc:
                logger.warning("cluster %s: watch failed: %s", cluster.name, exc)
                bookmark = ""
                time.sleep(min(max(left, 0.0), 1.0))
                continue
            report.rounds += 1
            report.running += len(synced.running)
            freed = len(synced.finished) + len(synced.failed) + len(synced.lost)
            report.ended += freed
            if freed:
                (on_freed or enqueue.cycle_nudge)()
            rest = watch_interval_s() - (time.monotonic() - began)
            if rest > 0:
                time.sleep(rest)
    return report


