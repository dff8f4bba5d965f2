"""Start a what-if (checked, its scenario built from the live state, stored, queued) and run
it in the background (the task `scheduling.what_if`), with its progress stored as it goes."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from portal.pages.access import plan_scope
from quotas.models import Queue
from scheduling import enqueue
from scheduling.models import WhatIf, WhatIfState
from scheduling.replay import ScenarioError, load_scenario
from scheduling.whatif.build import (
    MAX_HOURS,
    WhatIfError,
    apply_changes,
    changed_queues,
    fleet_changes,
    live_scenario,
    policy_effects,
)
from scheduling.whatif.compare import compare

logger = logging.getLogger(__name__)


def what_if_allowed(*, user: Any, changes: dict[str, Any]) -> None:
    """Admins may try anything; a lead only quota and strategy changes of the queues they
    decide for (their teams' subtrees); others nothing (PermissionDenied, naming why)."""
    scope = plan_scope(user)
    if scope.is_admin:
        return
    if not scope.allowed:
        raise PermissionDenied("what-if is for admins and team leads")
    fleet = fleet_changes(changes)
    if fleet:
        raise PermissionDenied(f"only admins may try {', '.join(fleet)} (fleet-wide changes)")
    paths = changed_queues(changes)
    ids = dict(Queue.objects.filter(path__in=paths).values_list("path", "id"))
    outside = sorted(p for p in paths if p in ids and not scope.can_plan(ids[p]))
    if outside:
        raise PermissionDenied(f"outside your subtree: {', '.join(outside)}")


def _hours(data: dict[str, Any]) -> float:
    hours = data.get("hours", 24)
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not (
            0 < hours <= MAX_HOURS):
        raise WhatIfError({"hours": [f"{hours!r}: a number above 0, at most {MAX_HOURS}"]})
    return float(hours)


def what_if_start(*, user: Any, data: Any) -> WhatIf:
    """Check the request, build both scenarios (400 on a bad change or a broken tree, nothing
    saved), store the what-if and queue its run."""
    if not isinstance(data, dict):
        raise WhatIfError({"detail": ["expected a JSON object"]})
    changes = data.get("changes") or {}
    if not isinstance(changes, dict):
        raise WhatIfError({"changes": ["expected an object"]})
    hours = _hours(data)
    what_if_allowed(user=user, changes=changes)
    now = timezone.now()
    base = live_scenario(now=now, hours=hours, repeat_past=bool(data.get("repeat_past", True)))
    # Policy effects are worked out here, from the database, and kept with the changes, so
    # the run and the downloads apply the same edits (a client's own are not taken).
    changes = {k: v for k, v in changes.items() if k != "policy_effects"}
    effects = policy_effects(apply_changes(base, changes), changes)
    if effects is not None:
        changes["policy_effects"] = effects
    changed = apply_changes(base, changes)
    try:
        load_scenario(changed)
    except ScenarioError as exc:
        raise WhatIfError({"changes": exc.problems}) from exc
    with transaction.atomic():
        run = WhatIf.objects.create(owner=user, created_at=now, hours=hours, changes=changes,
                                    scenario=base)
        transaction.on_commit(lambda: enqueue.what_if_queue(run.pk))
    return run


def what_if_scenario(run: WhatIf, variant: str) -> dict[str, Any]:
    """The scenario of one side ("baseline" or "changed"), for `manage.py simulate`."""
    if variant == "changed":
        return apply_changes(run.scenario, run.changes)
    return dict(run.scenario)


def what_if_run(*, what_if_id: int) -> None:
    """Replay both sides and store the comparison; idempotent (a finished one is left)."""
    run = WhatIf.objects.filter(pk=what_if_id).first()
    if run is None or run.state in (WhatIfState.DONE, WhatIfState.FAILED):
        return
    WhatIf.objects.filter(pk=run.pk).update(state=WhatIfState.RUNNING, progress=0.0)
    started = time.monotonic()

    def progress(frac: float) -> None:
        WhatIf.objects.filter(pk=run.pk).update(progress=round(frac, 3))

    try:
        result = compare(run.scenario, apply_changes(run.scenario, run.changes), progress)
    except Exception as exc:
        logger.exception("what-if %s failed", run.pk)
        WhatIf.objects.filter(pk=run.pk).update(state=WhatIfState.FAILED, error=str(exc)[:2000],
                                                seconds=time.monotonic() - started)
        return
    WhatIf.objects.filter(pk=run.pk).update(state=WhatIfState.DONE, progress=1.0,
                                            result=result,
                                            seconds=round(time.monotonic() - started, 2))
