"""Workloads: `submit`, `list`, `status`, `why`, `cancel`, `extend` (/api/v1/workloads)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from allot_cli.context import Context
from allot_cli.errors import CliError, Exit
from allot_cli.manifest import submission
from allot_cli.output import ago, emit, number, parse_time, span, table, when

STATES = ("pending", "reserved", "running", "preempting", "finished", "cancelled", "rejected",
          "failed")
DEFAULT_LIMIT = 50  # one page of the API


def _pods(w: dict[str, Any]) -> str:
    parts = []
    for ps in w.get("pod_sets", []):
        flavors = ",".join(ps["flavors"])
        parts.append(f"{ps['count']} x {ps['gpus']} GPU on {flavors}"
                     + (f" ({number(ps['cpu'])} CPU, {number(ps['memory_gib'])} GiB)"
                        if ps.get("cpu") or ps.get("memory_gib") else ""))
    return "; ".join(parts)


def _position(w: dict[str, Any], now: datetime) -> list[str]:
    pos = w.get("queue_position")
    if not pos:
        return []
    ahead = pos["in_queue"] - 1
    if ahead:
        lines = [f"Position {pos['in_queue']} in its queue: {ahead} workload"
                 f"{'' if ahead == 1 else 's'} ahead of it asking {pos['ahead_gpus']} GPUs; "
                 f"it asks {w['gpus']}."]
    else:
        lines = [f"First in its queue; it asks {w['gpus']} GPUs."]
    rng = pos.get("estimated_start_range") or {}
    if pos.get("estimated_start"):
        between = ""
        if rng.get("low") and rng.get("high") and rng["low"] != rng["high"]:
            between = f" (likely between {when(rng['low'], now)} and {when(rng['high'], now)})"
        lines.append(f"Estimated start: {when(pos['estimated_start'], now)}{between}.")
        if pos.get("estimate_assumes"):
            lines.append(pos["estimate_assumes"])
    elif pos.get("estimate_computed_at"):
        lines.append("Estimated start: later than the forecast looks ahead.")
    else:
        lines.append("Estimated start: not forecast yet (the forecast runs every minute).")
    held = parse_time(w.get("not_before"))
    if held is not None and held > now:
        lines.append(f"Held back until {when(w['not_before'], now)} after "
                     f"{w.get('backoff_count', 0)} failed start(s).")
    return lines


def run_submit(ctx: Context) -> int:
    """POST /api/v1/workloads; exit 1 when the workload is recorded rejected."""
    a = ctx.args
    body = submission(a.manifest, {
        "name": a.name, "queue": a.queue, "priority": a.priority, "image": a.image,
        "command": a.command, "duration": a.duration, "labels": a.label or None,
        "gpus": a.gpus, "pods": a.pods, "flavor": a.flavor, "cpu": a.cpu,
        "memory": a.memory})
    w = ctx.api().post("workloads", body)
    now = datetime.now(UTC)
    if w["state"] == "rejected":
        emit(w, ctx.output, lambda: "")
        reasons = "\n".join(f"  {r['code']}: {r['message']}" for r in w.get("reasons", []))
        raise CliError(Exit.REFUSED, f"{w['name']} (#{w['id']}) was rejected:\n{reasons}")
    emit(w, ctx.output, lambda: "\n".join(
        [f"Submitted {w['name']} (#{w['id']}): {w['state']} in {w['queue']}, {w['gpus']} GPUs."]
        + [f"  {line}" for line in _position(w, now)] + gangs_lines(w)))
    return Exit.OK


def gangs_lines(w: dict[str, Any]) -> list[str]:
    """A submission split into gangs (a LeaderWorkerSet's groups): how many, which ids."""
    gangs = w.get("gangs") or []
    if len(gangs) < 2:
        return []
    first, last = gangs[0], gangs[-1]
    return [f"{len(gangs)} groups, each a workload admitted on its own: {first['name']} "
            f"(#{first['id']}) .. {last['name']} (#{last['id']}); the figures above are one "
            "group's."]


def _reason_code(w: dict[str, Any]) -> str:
    return (w.get("reason") or {}).get("code", "")


def run_list(ctx: Context) -> int:
    """GET /api/v1/workloads, page after page: newest first, filtered."""
    a = ctx.args
    params: dict[str, Any] = {}
    states = [s for item in a.state or [] for s in item.split(",") if s]
    bad = [s for s in states if s not in STATES]
    if bad:
        raise CliError(Exit.USAGE, f"unknown state {', '.join(bad)} (one of {', '.join(STATES)})")
    if states:
        params["state"] = states
    if a.queue:
        params["queue"] = a.queue
    if a.name:
        params["name"] = a.name
    if a.mine:
        params["mine"] = "true"
    limit = None if a.all else a.limit
    items, total = ctx.api().pages("workloads", params, limit)
    now = datetime.now(UTC)

    def render() -> str:
        text = table(
            ["ID", "NAME", "QUEUE", "OWNER", "STATE", "GPUS", "PRIORITY", "AGE", "REASON"],
            [[w["id"], w["name"], w["queue"], w["owner"], w["state"], w["gpus"],
              w["priority_class"], ago(w["submitted_at"], now), _reason_code(w)]
             for w in items], right=(0, 5, 7))
        if total > len(items):
            text += (f"\n({len(items)} of {total:,} shown, newest first: --all or --limit N "
                     "for more)")
        return text if items else "No workloads."

    emit(items, ctx.output, render)
    return Exit.OK


def _detail(ctx: Context, workload_id: int) -> dict[str, Any]:
    return dict(ctx.api().get(f"workloads/{workload_id}"))


def run_status(ctx: Context) -> int:
    """GET /api/v1/workloads/ID: state, request, admission, the last events."""
    w = _detail(ctx, ctx.args.id)
    now = datetime.now(UTC)

    def render() -> str:
        rows = [
            ("queue", f"{w['queue']} (team {w['team'] or '-'}), owner {w['owner']}"),
            ("priority", f"{w['priority_class']}"
             + (", preemptible" if w["preemptible"] else ", not preemptible")
             + (", checkpoints" if w["checkpoint"] else "")),
            ("pods", _pods(w)),
            ("image", w["image"] or "-"),
            ("command", " ".join(w["command"]) or "-"),
            ("submitted", when(w["submitted_at"], now)
             + (f", expected to run {span(w['duration_hint_s'])}"
                if w.get("duration_hint_s") else "")),
        ]
        adm = w.get("admission")
        if adm:
            rows.append(("admission", f"cluster {adm['cluster']}, {adm['gpus']} GPUs of "
                         f"{adm['flavor']}{' (borrowed)' if adm['borrowed'] else ''}, nodes "
                         f"{', '.join(adm['nodes']) or '-'}; admitted "
                         f"{when(adm['admitted_at'], now)}"
                         + (f", ended {when(adm['ended_at'], now)} ({adm['end_reason']})"
                            if adm.get("ended_at") else "")))
        if w.get("finished_at"):
            rows.append(("ended", when(w["finished_at"], now)))
        if w.get("reason"):
            rows.append(("reason", f"{w['reason']['code']}: {w['reason']['message']}"))
        lines = [f"{w['name']} (#{w['id']}): {w['state']}, {w['gpus']} GPUs"]
        lines += [f"  {k:<10} {v}" for k, v in rows]
        lines += [f"  {line}" for line in _position(w, now)]
        events = w.get("events", [])[-5:]
        if events:
            lines.append(f"  last events ({len(w.get('events', []))} in all):")
            lines += [f"    {when(e['at'], now)}  {e['type']}"
                      + (f"  {e['code']}" if e.get("code") else "")
                      + (f": {e['message']}" if e.get("message") else "") for e in events]
        return "\n".join(lines)

    emit(w, ctx.output, render)
    return Exit.OK


def _distinct_newest(reasons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The cycle repeats a reason while nothing changes: each change once, newest first.
    out: list[dict[str, Any]] = []
    for r in reasons:
        if out and (out[-1]["code"], out[-1]["message"]) == (r["code"], r["message"]):
            continue
        out.append(r)
    return out[::-1]


_ISO = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


def _words(code: str, message: str, text: str | None, now: datetime) -> str:
    """A reason as people read it: the server's plain words (`reason_text` / a reason's
    `text`) with their ISO 8601 times as dates ("2026-05-01 12:10 UTC (in 10m)") and the code
    after it; from a server without plain words, the code and the engine's text."""
    if not text:
        return f"{code}: {message}"
    return f"{_ISO.sub(lambda m: when(m.group(0), now), text)} [{code}]"


def why_text(w: dict[str, Any], reasons: list[dict[str, Any]], now: datetime) -> str:
    """`allot why` for people: where the workload stands and why, `reasons` newest first."""
    head = f"{w['name']} (#{w['id']})"
    state, adm, current = w["state"], w.get("admission"), w.get("reason")
    earlier = reasons
    if state == "rejected":
        return "\n".join([f"{head} was rejected at submission:"]
                         + [f"  {_words(r['code'], r['message'], r.get('text'), now)}"
                            for r in reasons[::-1]])
    if state == "pending":
        lines = [f"{head} is pending in {w['queue']}.", *_position(w, now)]
        if current:
            lines.append("It waits: " + _words(current["code"], current["message"],
                                               w.get("reason_text"), now))
            if reasons and (reasons[0]["code"], reasons[0]["message"]) == (
                    current["code"], current["message"]):
                earlier = reasons[1:]  # said just above
        elif not reasons:
            lines.append("No reason yet: the next scheduling cycle will decide.")
    elif state in ("reserved", "running", "preempting") and adm:
        lines = [f"{head} is {state} on cluster {adm['cluster']} ({adm['gpus']} GPUs of "
                 f"{adm['flavor']}{', borrowed' if adm['borrowed'] else ''}), admitted "
                 f"{when(adm['admitted_at'], now)}."]
    else:
        lines = [f"{head} {state}" + (f" {when(w['finished_at'], now)}"
                                      if w.get("finished_at") else "") + "."]
        if adm and adm.get("end_reason"):
            lines.append(f"Its last admission ended: {adm['end_reason']}.")
    if earlier:
        lines.append("Earlier reasons, newest first:" if earlier is not reasons
                     else "Reasons, newest first:")
        lines += [f"  {when(r['at'], now)}  {_words(r['code'], r['message'], r.get('text'), now)}"
                  for r in earlier[:10]]
        if len(earlier) > 10:
            lines.append(f"  ... {len(earlier) - 10} earlier (allot status {w['id']} -o json "
                         "for all)")
    return "\n".join(lines)


def run_why(ctx: Context) -> int:
    """Why a workload waits (or what became of it): its reasons with their numbers, its
    place in its queue and the estimated start (GET /api/v1/workloads/ID)."""
    w = _detail(ctx, ctx.args.id)
    reasons = _distinct_newest(w.get("reasons", []))
    data = {k: w.get(k) for k in ("id", "name", "state", "queue", "gpus", "queue_position",
                                  "reason", "reason_text", "admission")}
    data["reasons"] = reasons
    emit(data, ctx.output, lambda: why_text(w, reasons, datetime.now(UTC)))
    return Exit.OK


def run_cancel(ctx: Context) -> int:
    """POST /api/v1/workloads/ID/cancel."""
    w = ctx.api().post(f"workloads/{ctx.args.id}/cancel")
    emit(w, ctx.output, lambda: f"{w['name']} (#{w['id']}): {w['state']}.")
    return Exit.OK


def run_extend(ctx: Context) -> int:
    """POST /api/v1/workloads/ID/extend: a session's time limit extended (exit 1 with the
    reasons when the quota or a policy refuses)."""
    out = ctx.api().post(f"workloads/{ctx.args.id}/extend", {"hours": ctx.args.hours})
    w = out["workload"]
    ends = f", ending {when(out['ends_at'], datetime.now(UTC))}" if out.get("ends_at") else ""
    emit(out, ctx.output, lambda: f"{w['name']} (#{w['id']}): time limit "
         f"{number(round(out['time_limit_s'] / 3600, 2))} h{ends}.")
    return Exit.OK
