"""Usage and cost per team, queue or flavor over a window."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q, Sum
from django.utils import timezone

from billing.models import LedgerEntry, UsageRecord, round_money, round_quantity
from billing.selectors.access import narrow, visible_team_ids
from billing.selectors.cost_centers import default_currency
from billing.selectors.provisional import provisional_by
from scheduling.models import Admission

GROUPS = {"team": ("team__name", "team_name"), "queue": ("queue", "queue"),
          "flavor": ("flavor", "flavor")}
ZERO = Decimal("0.0000")
# What an admission counts under, per grouping (the usage records' and ledger's keys).
_ADMISSION_KEY = {
    "team": lambda a: a.workload.team.name if a.workload.team_id else "",
    "queue": lambda a: a.workload.queue.path,
    "flavor": lambda a: a.flavor.name,
}


def usage_summary(
    *, user, group_by: str, start: datetime, end: datetime, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Reserved, frozen and active GPU-hours, efficiency and cost per team, queue or flavor.

    `cost` is `billed` (the ledger) plus `provisional` (what admissions held in the window
    that the hourly rollup has not priced yet, `provisional_by`): the same month to date as
    the dashboard's cost cards and the budgets."""
    record_key, ledger_key = GROUPS[group_by]
    team_ids = visible_team_ids(user)
    records = narrow(UsageRecord.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "reserved_gpu_hours": ZERO, "frozen_gpu_hours": ZERO, "active_gpu_hours": ZERO,
        "metered_gpu_hours": ZERO, "gap_gpu_hours": ZERO, "core_hours": ZERO,
        "cost": Decimal("0.00"), "billed": Decimal("0.00"), "provisional": Decimal("0.00"),
        "currency": "",
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
    admissions = Admission.objects.filter(reserved_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    if team_ids is not None:
        admissions = admissions.filter(workload__team_id__in=team_ids)
    for key, prov in provisional_by(admissions, now=now or timezone.now(), since=start,
                                    until=end, key=_ADMISSION_KEY[group_by]).items():
        if prov.cost or prov.gpu_hours:
            row = rows[key]
            row["provisional"] += prov.cost
            row["currency"] = row["currency"] or prov.currency
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
        row["billed"] = round_money(Decimal(row["cost"]))
        row["provisional"] = round_money(Decimal(row["provisional"]))
        row["cost"] = round_money(row["billed"] + row["provisional"])
        if metered <= 0:
            row["active_gpu_hours"] = None  # nothing metered: unknown, not zero
        row["currency"] = row["currency"] or default_currency()
        out.append({group_by: key, **row})
    return out
