"""Session policies: an admin's limits for interactive sessions of some queues and users (the
idle timeout and threshold, the longest time limit), offered to scheduling/sessions.py through
`scheduling.extensions.register_session_rules`.

A policy applies to a session when its `users` is empty or names the session's owner, and its
`queues` is empty or holds the session's queue or an ancestor of it. How specific it is: first
whether it names the user, then the depth of the deepest queue path of it that matches (0 for
every queue). scheduling/sessions.py resolves each setting on its own, the most specific source
that sets it winning (docs/workload-kinds.md, "Session limits").
"""

from __future__ import annotations

from scheduling.extensions import SessionRule

from .models import SessionPolicy


def _depth(queues: list[str], queue_path: str) -> int | None:
    """The depth of the deepest of `queues` that is `queue_path` or an ancestor (0: empty)."""
    if not queues:
        return 0
    depths = [p.count("/") + 1 for p in (str(q).strip("/") for q in queues)
              if p and (queue_path == p or queue_path.startswith(p + "/"))]
    return max(depths) if depths else None


def session_rules(queue_path: str, username: str) -> list[SessionRule]:
    """The enabled session policies that apply to `username`'s sessions in `queue_path`."""
    out = []
    for policy in SessionPolicy.objects.filter(enabled=True):
        users = [str(u) for u in policy.users or []]
        if users and username not in users:
            continue
        depth = _depth(list(policy.queues or []), queue_path)
        if depth is None:
            continue
        out.append(SessionRule(
            source=f"policy {policy.name}", user_specific=bool(users), depth=depth,
            idle_timeout_s=policy.idle_timeout_s, idle_gpu_util_pct=policy.idle_gpu_util_pct,
            max_time_s=policy.max_time_s))
    return out
