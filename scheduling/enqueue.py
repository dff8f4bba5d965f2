"""Work handed to the Celery workers: every task the scheduling code queues, by its name.

The flow modules (submission, the cycle, dispatch) queue tasks through here, looked up by
their registered names, so none of them imports `scheduling.tasks`, which imports them. The
tasks are registered when Django starts (`SchedulingConfig.ready`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import current_app

logger = logging.getLogger(__name__)


def _task(name: str) -> Any:
    return current_app.tasks[name]


def dispatch_cluster(cluster_id: int, **options: Any) -> None:
    """Queue a dispatch pass for one cluster."""
    _task("scheduling.dispatch_cluster").apply_async((cluster_id,), **options)


def admissions_suspend(admission_ids: list[int]) -> None:
    """Queue the suspension of these admissions' backend objects (preemption)."""
    _task("scheduling.backend_suspend_many").delay(admission_ids)


def admissions_delete(admission_ids: list[int]) -> None:
    """Queue the deletion of these admissions' backend objects."""
    _task("scheduling.backend_delete_many").delay(admission_ids)


def admission_delete(admission_id: int) -> None:
    """Queue the deletion of one admission's backend objects."""
    _task("scheduling.backend_delete").delay(admission_id)


_NUDGE_WINDOW_S = 0.3


_next_nudge_eta: float = 0.0


def cycle_nudge() -> None:
    """Ask for a scheduling cycle soon, at most one per window per process (debounced).

    A nudge already scheduled for the future will see this commit, so later ones in the same
    window are dropped. Broker errors are logged: the beat runs a cycle anyway.
    """
    global _next_nudge_eta
    now = time.monotonic()
    if _next_nudge_eta > now:
        return
    _next_nudge_eta = now + _NUDGE_WINDOW_S
    try:
        _task("scheduling.cycle").apply_async(kwargs={"nudged": True},
                                              countdown=_NUDGE_WINDOW_S, expires=10)
    except Exception:
        logger.warning("could not nudge the scheduling cycle; the beat will run it",
                       exc_info=True)
