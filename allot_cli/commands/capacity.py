"""`allot capacity list|request|approve|deny`: quota changes a lead asks for and an admin
decides (/api/v1/capacity-requests)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from allot_cli.context import Context
from allot_cli.errors import Exit
from allot_cli.output import ago, emit, moment, number, table

STATES = ("submitted", "approved", "active", "denied", "cancelled", "reverted")


def _change(r: dict[str, Any]) -> str:
    parts = [f"{k} {number(r[k])}" for k in ("min", "max") if r.get(k) is not None]
    return f"{r['queue']} {r['flavor']}/{r['resource']}: " + ", ".join(parts)


def _one(r: dict[str, Any]) -> str:
    lines = [f"Capacity request #{r['id']}: {r['state']}. {_change(r)}",
             f"  requested by {r['requested_by']}, starts {moment(r['starts_at'])}"
             + (f", ends {moment(r['ends_at'])}" if r.get("ends_at") else ", permanent"),
             f"  justification: {r['justification']}"]
    if r.get("decided_by"):
        lines.append(f"  decided by {r['decided_by']} at {moment(r['decided_at'])}"
                     + (f": {r['decision_comment']}" if r.get("decision_comment") else ""))
    return "\n".join(lines)


def run_capacity_list(ctx: Context) -> int:
    """GET /api/v1/capacity-requests (newest first)."""
    a = ctx.args
    params = {k: v for k, v in (("state", a.state), ("queue", a.queue)) if v}
    items, total = ctx.api().pages("capacity-requests", params, None if a.all else a.limit)
    now = datetime.now(UTC)

    def render() -> str:
        if not items:
            return "No capacity requests."
        text = table(["ID", "STATE", "QUEUE", "KEY", "MIN", "MAX", "BY", "AGE"],
                     [[r["id"], r["state"], r["queue"], f"{r['flavor']}/{r['resource']}",
                       number(r["min"]), number(r["max"]), r["requested_by"],
                       ago(r["created_at"], now)] for r in items], right=(0, 4, 5, 7))
        if total > len(items):
            text += f"\n({len(items)} of {total:,} shown: --all or --limit N for more)"
        return text

    emit(items, ctx.output, render)
    return Exit.OK


def run_capacity_request(ctx: Context) -> int:
    """POST /api/v1/capacity-requests."""
    a = ctx.args
    body: dict[str, Any] = {"queue": a.queue, "flavor": a.flavor, "resource": a.resource,
                            "justification": a.justification}
    for key, value in (("min", a.min), ("max", a.max), ("starts_at", a.starts),
                       ("ends_at", a.ends)):
        if value is not None:
            body[key] = value
    r = ctx.api().post("capacity-requests", body)
    emit(r, ctx.output, lambda: _one(r))
    return Exit.OK


def run_capacity_decide(ctx: Context) -> int:
    """POST /api/v1/capacity-requests/ID/approve or /deny, with the comment."""
    a = ctx.args
    r = ctx.api().post(f"capacity-requests/{a.id}/{a.decision}", {"comment": a.comment or ""})
    emit(r, ctx.output, lambda: _one(r))
    return Exit.OK
