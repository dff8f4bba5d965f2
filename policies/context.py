"""The six variables of one submission (request, queue, team, cost_center, fleet, now): read
afresh (`submission_variables`), or from the pieces cached in a change-log view
(`cached_submission_variables`), reading only those not cached or written since.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone

from quotas.models import Queue, Team

from .context_rows import context_rows, parts_for, submission_rows
from .cost_center import EMPTY_COST_CENTER, UNREAD, cost_center_variables
from .variables import (
    EMPTY_FLEET,
    EMPTY_QUEUE,
    EMPTY_TEAM,
    admitted_usage_by_leaf,
    fleet_variables,
    now_variables,
    queue_variables_many,
    request_variables,
    team_variables,
)


def submission_variables(
    *, data: Mapping[str, Any], queue: Queue, team: Team | None, user: Any,
    is_update: bool = False, now: datetime | None = None, needs: Iterable[str] | None = None,
    rows: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """All six variables for one submission (`rows`: `submission_rows` already read).

    `needs`: the variables the policies read; the others get neutral values without a query.
    The fleet, the quota tree and the team are read in one query (`submission_rows`);
    billing's cost center in its own.
    """
    now = now or timezone.now()
    needed = set(needs) if needs is not None else {"queue", "team", "cost_center", "fleet"}
    if rows is None:
        rows = submission_rows(queue=queue, team=team, needed=needed, now=now)
    if rows is None:
        rows = {}
        if needed & {"queue", "fleet"}:
            rows["usage"] = admitted_usage_by_leaf()
    usage = rows.get("usage", {})
    fleet = fleet_variables(usage, capacity_rows=rows.get("capacity"),
                            cluster_rows=rows.get("clusters")) if needed & {"queue", "fleet"} \
        else EMPTY_FLEET
    username = user.get_username() if user is not None and hasattr(user, "get_username") else ""
    return {
        "request": request_variables(
            data, queue_path=queue.path, team=team.name if team else "", user=username,
            is_update=is_update,
        ),
        "queue": queue_variables_many([queue], fleet=fleet, usage_by_leaf=usage,
                                      entry_rows=rows.get("entries"))[queue.path]
        if "queue" in needed else {**EMPTY_QUEUE, "path": queue.path, "name": queue.name},
        "team": team_variables(team, now=now, approvals=rows.get("approvals"),
                               department=rows.get("department")) if "team" in needed else {
            **EMPTY_TEAM, "name": team.name if team else ""},
        "cost_center": cost_center_variables(
            team, now=now, cost_center=rows.get("cost_center", UNREAD))
        if "cost_center" in needed
        else dict(EMPTY_COST_CENTER),
        "fleet": fleet,
        "now": now_variables(now),
    }


# Where each piece is cached (changes.View): its topic and key.
_CONFIG_USAGE = frozenset({"config", "usage"})


def _part_key(part: str, queue: Queue, team: Team | None) -> tuple[str, tuple[Any, ...]]:
    if part == "usage":
        return "usage", ("usage",)
    if part in ("capacity", "clusters"):
        return "config", (part,)
    if part == "entries":
        return "config", ("entries", queue.path)
    return "config", (part, team.pk if team is not None else None)


def cached_submission_variables(
    view: Any, *, data: Mapping[str, Any], queue: Queue, team: Team | None, user: Any,
    is_update: bool = False, now: datetime, needs: Iterable[str],
) -> dict[str, Any]:
    """`submission_variables` from the pieces cached in `view` (a `changes.View`, validated
    against the change log this submission): only the pieces not cached, or written since, are
    read, in one query; with nothing changed, none. Equal to `submission_variables`.
    """
    needed = set(needs)
    parts = parts_for(needed, team)
    missing = {p for p in parts if not view.has(*_part_key(p, queue, team))}
    fresh: dict[str, Any] = {}
    if missing:
        rows = context_rows(parts=missing, queue=queue, team=team) or {}
        for p in missing:
            value = (rows.get("approvals", []), rows.get("department", "")) if p == "team" \
                else rows.get(p)
            fresh[p] = value
            view.put(*_part_key(p, queue, team), value)

    def part(p: str) -> Any:
        if p in fresh:
            return fresh[p]
        topic, key = _part_key(p, queue, team)
        return view.store.parts[topic][key]

    fleet: dict[str, Any] = EMPTY_FLEET
    usage: Mapping[str, Any] = {}
    if needed & {"queue", "fleet"}:
        usage = part("usage")
        fleet = view.derive(("fleet",), _CONFIG_USAGE, lambda: fleet_variables(
            usage, capacity_rows=part("capacity"), cluster_rows=part("clusters")))
    if "queue" in needed:
        queue_vars = view.derive(("queue", queue.path), _CONFIG_USAGE, lambda: (
            queue_variables_many([queue], fleet=fleet, usage_by_leaf=usage,
                                 entry_rows=part("entries"))[queue.path]))
    else:
        queue_vars = {**EMPTY_QUEUE, "path": queue.path, "name": queue.name}
    if "team" in needed and team is not None:
        approvals, department = part("team")
        cutoff = now.timestamp()
        team_vars = team_variables(
            team, now=now, department=department,
            approvals=[n for n, expires in approvals if expires is None or expires > cutoff])
    else:
        team_vars = {**EMPTY_TEAM, "name": team.name if team else ""}
    if "cost_center" in needed:
        cost_center = cost_center_variables(
            team, now=now, cost_center=part("cost_center") if "cost_center" in parts
            else UNREAD)
    else:
        cost_center = dict(EMPTY_COST_CENTER)
    username = user.get_username() if user is not None and hasattr(user, "get_username") else ""
    return {
        "request": request_variables(
            data, queue_path=queue.path, team=team.name if team else "", user=username,
            is_update=is_update,
        ),
        "queue": queue_vars,
        "team": team_vars,
        "cost_center": cost_center,
        "fleet": fleet,
        "now": now_variables(now),
    }
