"""`allot usage`: GPU-hours and cost per team, queue or flavor (/api/v1/usage)."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from allot_cli.context import Context
from allot_cli.errors import Exit
from allot_cli.output import emit, moment, table


def _dec(value: Any) -> Decimal:
    return Decimal(str(value)) if value not in (None, "") else Decimal(0)


def run_usage(ctx: Context) -> int:
    """GET /api/v1/usage?group_by=&from=&to= (default: this month so far)."""
    a = ctx.args
    params = {"group_by": a.group_by}
    if a.since:
        params["from"] = a.since
    if a.until:
        params["to"] = a.until
    data = ctx.api().get("usage", params)
    rows = data.get("rows", [])

    def render() -> str:
        totals: dict[str, Decimal] = defaultdict(Decimal)
        hours = Decimal(0)
        for r in rows:
            totals[r["currency"] or "-"] += _dec(r["cost"])
            hours += _dec(r["reserved_gpu_hours"])
        body = table(
            [a.group_by.upper(), "GPU-HOURS", "ACTIVE", "FROZEN", "GAP", "CORE-HOURS",
             "EFFICIENCY", "COST"],
            [[r["key"] or "-", *(r[k] if r[k] is not None else "-" for k in (
                "reserved_gpu_hours", "active_gpu_hours", "frozen_gpu_hours", "gap_gpu_hours",
                "core_hours")),
              "-" if r["efficiency"] is None else f"{100 * _dec(r['efficiency']):.1f}%",
              f"{r['cost']} {r['currency']}".strip()] for r in rows],
            right=range(1, 8))
        period = f"From {moment(data['from'])} to {moment(data['to'])}, by {a.group_by}"
        if not rows:
            return f"{period}: no usage."
        cost = ", ".join(f"{v} {k}" for k, v in sorted(totals.items()))
        return f"{period}:\n{body}\nTotal: {hours} GPU-hours, {cost}"

    emit(data, ctx.output, render)
    return Exit.OK
