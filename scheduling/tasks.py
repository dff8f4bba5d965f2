"""Celery tasks: the scheduling cycle, the outbox's delivery (dispatch, suspension, cleanup),
sync, maintenance.

Tasks hold no logic: they load ids and call the workers' and the fleet's services; cluster
calls that must not be lost are outbox rows, retried by their delivery. Every task is
idempotent.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from scheduling import outbox
from scheduling.fleet.delivery import outbox_deliver, outbox_prune
from scheduling.fleet.dispatch import cluster_dispatch
from scheduling.fleet.maintenance import workloads_maintain
from scheduling.fleet.orphans import orphans_sweep
from scheduling.fleet.sync import cluster_sync
from scheduling.fleet.watch import cluster_watch
from scheduling.models import Admission, Cluster, WorkloadState
from scheduling.pacing import cycle_mark, cycle_paced
from scheduling.planner.services import trace_replay_run
from scheduling.whatif.services import what_if_run
from scheduling.workers.cycle import cycle_run
from scheduling.workers.eta import estimates_refresh

logger = logging.getLogger(__name__)


def cycle_and_dispatch(*, wait: bool = False, nudged: bool = False) -> dict[str, int] | None:
    """One cycle, then phase two of dispatch for what it admitted, in this task.

    Dispatching here saves a trip through the broker between a reservation and its Jobs; a
    cluster whose dispatch pass is busy elsewhere or failed gets an outbox row (a pass
    delivered later, retried until it succeeds). A `nudged` cycle is paced
    (scheduling/pacing.py).
    """
    if nudged and cycle_paced():
        return None
    report = cycle_run(enqueue_dispatch=False, wait=wait)
    if not report.ran:
        return None
    cycle_mark(ended_at=timezone.now(), seconds=report.seconds,
               guarantee_blocked=report.guarantee_blocked)
    if report.admitted or report.preempted or report.rejected or report.released:
        logger.info("cycle: %d admitted, %d preempted, %d rejected, %d released, %d requeued, "
                    "%d pending in %.3fs", len(report.admitted), len(report.preempted),
                    len(report.rejected), len(report.released), len(report.requeued),
                    report.pending, report.seconds)
    for cluster_id in sorted(report.dispatch_clusters):
        # Another pass on the cluster is short: wait for it rather than a broker trip.
        result = cluster_dispatch(cluster_id=cluster_id, wait_s=2.0)
        if result.skipped or result.errors:
            with transaction.atomic():
                outbox.messages_write([outbox.message_dispatch(cluster_id=cluster_id,
                                                               at=timezone.now())])
    return {"admitted": len(report.admitted), "preempted": len(report.preempted),
            "pending": report.pending}


def cycle_soon() -> None:
    """Capacity came back: run the cycle (and its dispatch) here and now, right after the
    cycle another process may be in (which may have read the database before the release)."""
    cycle_and_dispatch(wait=True)


@shared_task(name="scheduling.cycle", ignore_result=True)
def scheduling_cycle(nudged: bool = False) -> dict[str, int] | None:
    """One scheduling cycle and the dispatch of its admissions; skipped if another process
    holds the scheduling lock, or, when a submission asked for it, paced."""
    return cycle_and_dispatch(nudged=nudged)


@shared_task(name="scheduling.outbox_deliver", ignore_result=True)
def deliver_outbox() -> None:
    """Send the cluster calls of the outbox that are due (deletes, suspends, dispatch
    passes); what one pass leaves is the next's (the beat's, or a nudge's)."""
    outbox_deliver()


@shared_task(name="scheduling.sync_cluster", ignore_result=True)
def sync_cluster(cluster_id: int, nodes: bool = True) -> None:
    """Pod status and node inventory of one cluster."""
    cluster_sync(cluster_id=cluster_id, nodes=nodes)


@shared_task(name="scheduling.sync_all", ignore_result=True)
def sync_all() -> None:
    """Sync every enabled cluster, then dispatch what a lost task left undispatched.

    Clusters are synced in this task, one after the other: a fan-out of one task per cluster
    per beat floods the queue on a busy worker; shard by running more workers instead.
    """
    freed = False
    for cluster_id in Cluster.objects.filter(enabled=True).values_list("pk", flat=True):
        try:
            report = cluster_sync(cluster_id=cluster_id, nudge=False)
        except Exception:
            logger.exception("sync of cluster %s failed", cluster_id)
            continue
        freed = freed or bool(report.finished or report.failed or report.lost)
    if freed:
        # Capacity came back: schedule it now rather than one broker trip later.
        cycle_soon()
    # Once per cluster (the model's ordering cleared: DISTINCT over it gave one pass per
    # stale admission), and only for work still waiting to start.
    stale = (Admission.objects.filter(ended_at__isnull=True, dispatched_at__isnull=True,
                                      workload__state=WorkloadState.RESERVED,
                                      reserved_at__lt=timezone.now() - timedelta(seconds=10))
             .order_by().values_list("cluster_id", flat=True).distinct())
    for cluster_id in sorted(stale):
        cluster_dispatch(cluster_id=cluster_id)


def watch_enabled() -> bool:
    """Whether the workers follow clusters by watch (else only by the periodic sync)."""
    from django.conf import settings

    return bool(settings.ALLOT_WORKERS["watch"])


@shared_task(name="scheduling.watch", ignore_result=True)
def watch_clusters(seconds: float | None = None) -> None:
    """Follow every enabled cluster by watch for a while, a thread per cluster, then hand
    over to a fresh task (so a deploy or a crash never leaves clusters unwatched for long).

    One watcher per cluster across all workers: the beat sends this task every few seconds
    and a copy that finds every cluster watched returns at once. Changes are synced as the
    backend reports them, and capacity freed by finished workloads is scheduled at once
    (`cycle_soon`); `sync_all` remains the periodic resync.
    """
    import threading

    from django.conf import settings
    from django.db import connection


    if not watch_enabled():
        return
    seconds = seconds or float(settings.ALLOT_WORKERS["watch_session_s"])
    watched: list[bool] = []
    # Freed capacity is scheduled by a thread of its own, so the watchers keep watching
    # while a cycle runs; pokes that come during a cycle make one more cycle after it.
    freed = threading.Event()
    done = threading.Event()

    def schedule() -> None:
        try:
            while not done.is_set():
                if freed.wait(0.5):
                    freed.clear()
                    try:
                        cycle_soon()
                    except Exception:
                        logger.exception("cycle after freed capacity failed")
        finally:
            connection.close()

    def follow(cluster_id: int) -> None:
        try:
            watched.append(cluster_watch(cluster_id=cluster_id, seconds=seconds,
                                         on_freed=freed.set).watched)
        except Exception:
            logger.exception("watch of cluster %s failed", cluster_id)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=follow, args=(pk,), name=f"watch-{pk}", daemon=True)
               for pk in Cluster.objects.filter(enabled=True).values_list("pk", flat=True)]
    runner = threading.Thread(target=schedule, name="watch-cycles", daemon=True)
    runner.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    runner.join()
    if any(watched):
        watch_clusters.apply_async(expires=30)


@shared_task(name="scheduling.sweep_orphans", ignore_result=True)
def sweep_orphans() -> None:
    """Delete objects left on the clusters by workloads gone or ended (fleet/orphans.py)."""
    orphans_sweep()


@shared_task(name="scheduling.maintain", ignore_result=True)
def maintain() -> None:
    """Clean up finished workloads' objects after the TTL; reclaim stuck workloads; forget
    outbox rows delivered long ago."""
    workloads_maintain()
    outbox_prune()


# The end of the pause after the last periodic refresh (epoch seconds, in the shared cache).
ETA_PAUSED_UNTIL_KEY = "scheduling:eta:paused-until"


@shared_task(name="scheduling.eta_refresh", ignore_result=True)
def eta_refresh() -> dict[str, float]:
    """Forecast every pending workload's start and store it (scheduling/workers/eta.py).

    Paced like the cycle: the next periodic refresh comes no sooner than `pace` times the
    last one's duration after it (ALLOT_ETA_PACE, default 3: at most a quarter of a worker).
    With 20,000 pending a refresh takes most of a minute, the beat's interval, and would
    otherwise keep a core busy next to the cycle and the portal."""
    from django.conf import settings
    from django.core.cache import cache

    skipped = {"pending": 0, "estimated": 0, "seconds": 0.0}
    if time.time() < float(cache.get(ETA_PAUSED_UNTIL_KEY) or 0.0):
        return skipped
    report = estimates_refresh()
    if report.skipped:
        return skipped
    pace = float(settings.ALLOT_ETA.get("pace", 0.0))
    if pace > 0:
        cache.set(ETA_PAUSED_UNTIL_KEY, time.time() + pace * report.seconds,
                  max(1, int(pace * report.seconds) + 1))
    logger.info("eta: %d pending, %d with a start within the horizon, in %.2fs "
                "(forecast %.2fs)", report.pending, report.estimated, report.seconds,
                report.forecast_seconds)
    return {"pending": report.pending, "estimated": report.estimated,
            "seconds": round(report.seconds, 3)}


@shared_task(name="scheduling.what_if", ignore_result=True)
def what_if(what_if_id: int) -> None:
    """Replay a what-if's two sides and store the comparison (scheduling/whatif/)."""
    what_if_run(what_if_id=what_if_id)


@shared_task(name="scheduling.trace_replay", ignore_result=True)
def trace_replay(replay_id: int) -> None:
    """Replay an uploaded trace three ways and store the comparison (scheduling/planner/)."""
    trace_replay_run(replay_id=replay_id)
