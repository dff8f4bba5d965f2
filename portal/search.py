"""Global search (the header's box, /search/, `GET /api/v1/search`): workloads, queues and
users whose name contains the words, grouped by kind, each limited to what the user may see
by the API's rule (`scheduling.selectors.workloads_visible`, `access.Scope.can_see_queue`):
researchers find their own and their teams' workloads, their part of the tree, and the
people of their teams; admins everything."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q

from portal.pages.access import user_scope
from quotas.models import Queue, TeamMembership
from scheduling.selectors import workloads_visible

MAX_PER_KIND = 25
MAX_QUERY = 100


class SearchError(ValueError):
    """A query that cannot be searched (too short or too long), said in words."""


def search_query_clean(raw: str) -> str:
    """The query stripped; SearchError naming the length when it is not 2 to 100 characters."""
    q = (raw or "").strip()
    if len(q) < 2:
        raise SearchError(f"q: type at least 2 characters (got {len(q)})")
    if len(q) > MAX_QUERY:
        raise SearchError(f"q: at most {MAX_QUERY} characters (got {len(q)})")
    return q


def site_search(*, user: Any, q: str) -> dict[str, Any]:
    """The matches of `q` the user may see, by kind: `workloads`, `queues`, `users`, each at
    most MAX_PER_KIND (newest workloads first), and whether each kind had more."""
    scope = user_scope(user)
    workloads = list(
        workloads_visible(user).filter(Q(name__icontains=q) | Q(pk=int(q) if q.isdigit()
                                                                  else -1))
        .defer("manifest").order_by("-submitted_at", "-id")[:MAX_PER_KIND + 1])
    queues = [queue for queue in Queue.objects.filter(
        Q(path__icontains=q) | Q(description__icontains=q)).order_by("path")
        if scope.can_see_queue(queue.pk)]
    people = User.objects.filter(Q(username__icontains=q) | Q(first_name__icontains=q)
                                 | Q(last_name__icontains=q), is_active=True)
    if not scope.is_admin:
        mates = TeamMembership.objects.filter(
            team__in=TeamMembership.objects.filter(user_id=user.pk).values("team_id")
        ).values("user_id")
        people = people.filter(Q(pk__in=mates) | Q(pk=user.pk))
    users = list(people.order_by("username")[:MAX_PER_KIND + 1])
    return {
        "q": q,
        "workloads": workloads[:MAX_PER_KIND], "workloads_more": len(workloads) > MAX_PER_KIND,
        "queues": queues[:MAX_PER_KIND], "queues_more": len(queues) > MAX_PER_KIND,
        "users": users[:MAX_PER_KIND], "users_more": len(users) > MAX_PER_KIND,
    }
