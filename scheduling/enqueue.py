"""Work handed to the Celery workers: every task the scheduling code queues, by its name.

The flow modules (submission, the cycle, dispatch) queue tasks through here, looked up by
their registered names, so none of them imports `scheduling.tasks`, which imports them. The
tasks are registered when Django starts (`SchedulingConfig.ready`).

Only nudges go through here, and they never raise: what must reach a cluster (deletes,
suspends, dispatch passes) is an outbox row written with the state change
(`scheduling/outbox.py`), which the nudge merely hurries. Nor do they retry a publish the
broker refused: they run in the request after its commit, and the beat does the work anyway.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from celery import current_app

logger = logging.getLogger(__name__)


# A publish the broker refused is not tried again (Celery's default tries 3 more times over
# about 0.6 s, which a request would wait for).
_ONE_ATTEMPT = {"max_retries": 0}


def _task(name: str) -> Any:
    return current_app.tasks[name]


def outbox_nudge() -> None:
    """Ask for a delivery of the outbox soon (its rows are committed: this only hurries them).

    Never raises: a broker error is logged, and the beat's delivery pass sends them anyway.
    """
    try:
        _task("scheduling.outbox_deliver").apply_async(expires=30, retry_policy=_ONE_ATTEMPT)
    except Exception:
        logger.warning("could not nudge the outbox delivery; the beat will deliver it",
                       exc_info=True)


def cycle_nudge_at(at: datetime) -> None:
    """Ask for a (nudged) cycle at `at`; broker errors are logged, the beat runs one anyway."""
    try:
        _task("scheduling.cycle").apply_async(kwargs={"nudged": True}, eta=at,
                                              expires=at + timedelta(seconds=10))
    except Exception:
        logger.warning("could not queue a paced scheduling cycle; the beat will run it",
                       exc_info=True)


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
                                              countdown=_NUDGE_WINDOW_S, expires=10,
                                              retry_policy=_ONE_ATTEMPT)
    except Exception:
        logger.warning("could not nudge the scheduling cycle; the beat will run it",
                       exc_info=True)


def what_if_queue(what_if_id: int) -> None:
    """Queue a what-if's replays (after its row is committed); a broker error is logged and
    the what-if stays queued (`manage.py` or a retry from its page runs it)."""
    try:
        _task("scheduling.what_if").apply_async(args=[what_if_id], retry_policy=_ONE_ATTEMPT)
    except Exception:
        logger.warning("could not queue what-if %s", what_if_id, exc_info=True)


def trace_replay_queue(replay_id: int) -> None:
    """Queue a trace replay's three runs (after its row is committed); a broker error is
    logged and the replay stays queued."""
    try:
        _task("scheduling.trace_replay").apply_async(args=[replay_id],
                                                     retry_policy=_ONE_ATTEMPT)
    except Exception:
        logger.warning("could not queue trace replay %s", replay_id, exc_info=True)
