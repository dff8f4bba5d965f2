"""Usage and cost per team, queue or flavor over a window."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q, Sum

from billing.models import LedgerEntry, UsageRecord, round_money, round_quantity
from billing.selectors.access import narrow, visible_team_ids
from billing.selectors.cost_centers import default_currency

GROUPS = {"team": ("team__name", "team_name"), "queue": ("queue", "queue"),
          "flavor": ("flavor", "flavor")}
ZERO = Decimal("0.0000")


def usage_summary(
    *, user, group_by: str, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Reserved, frozen and active GPU-hours, efficiency and cost per team, queue or flavor."""
    record_key, ledger_key = GROUPS[group_by]
    team_ids = visible_team_ids(user)
    records = narrow(UsageRecord.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "reserved_gpu_hours": ZERO, "frozen_gpu_hours": ZERO, "active_gpu_hours": ZERO,
        "metered_gpu_hours": ZERO, "gap_gpu_hours": ZERO, "core_hours": ZERO,
        "cost": Decimal("0.00"), "currency": "",
    })
    agg = records.values(record_key, "phase").annotate(
        gpu=Sum("gpu_hours"), active=Sum("active_gpu_hours"), gap=Sum("gap_gpu_hours"),
        cores=Sum("core_hours"),
        metered=Sum("gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
        metered_gap=Sum("gap_gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
    )
    for a in agg:
        row = rows[a[record_key] or ""]
        row["core_hours"] += a["cores"] or ZERO
        if a["phase"] == "frozen":
            row["frozen_gpu_hours"] += a["gpu"] or ZERO
            continue
        row["reserved_gpu_hours"] += a["gpu"] or ZERO
        row["active_gpu_hours"] += a["active"] or ZERO
        row["gap_gpu_hours"] += a["gap"] or ZERO
        row["metered_gpu_hours"] += (a["metered"] or ZERO) - (a["metered_gap"] or ZERO)
    ledger = narrow(LedgerEntry.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    for c in ledger.values(ledger_key, "currency").annotate(a=Sum("amount")):
        row = rows[c[ledger_key] or ""]
        row["cost"] += c["a"]
        row["currency"] = c["currency"]
    out = []
    for key in sorted(rows):
        row = rows[key]
        metered = row.pop("metered_gpu_hours")
        row["efficiency"] = (
            round_quantity(row["active_gpu_hours"] / metered) if metered > 0 else None
        )
        # Sums come back as floats on SQLite: keep the stated rounding on every backend.
        for name in ("reserved_gpu_hours", "frozen_gpu_hours", "active_gpu_hours",
                     "gap_gpu_hours", "core_hours"):
            row[name] = round_quantity(Decimal(row[name]))
        row["cost"] = round_money(Decimal(row["cost"]))
        if metered <= 0:
            row["active_gpu_hours"] = None  # nothing metered: unknown, not zero
        row["currency"] = row["currency"] or default_currency()
        out.append({group_by: key, **row})
    return out
