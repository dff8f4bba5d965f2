"""Monthly invoices per cost center, frozen from the ledger."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncMonth
from django.utils import timezone

from billing.models import (
    CostCenter,
    Invoice,
    InvoiceLine,
    InvoiceWorkloadLine,
    LedgerEntry,
    LedgerHead,
)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[first instant of the month, first instant of the next) in UTC."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    nxt = datetime(
        month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=UTC
    )
    return start, nxt


@transaction.atomic
def invoice_issue(
    *, cost_center: CostCenter, month: date, user=None, now: datetime | None = None
) -> Invoice:
    """Issue a cost center's invoice for a finished month; its total equals the ledger's sum.

    The invoice covers the ledger entries of the month's hours up to the ledger's current tip
    (recorded as `ledger_seq_max`), grouped per team, queue, flavor and kind, with a
    per-workload appendix.
    """
    now = now or timezone.now()
    start, end = month_bounds(month)
    if end > now:
        raise ValidationError(
            f"{start:%Y-%m} is not over yet (ends {end.isoformat()}): invoices are issued "
            "for finished months"
        )
    existing = Invoice.objects.filter(cost_center=cost_center, period_start=start).first()
    if existing is not None:
        raise ValidationError(
            f"{cost_center.code} {start:%Y-%m} was already invoiced as {existing.number}"
        )
    # Lock the ledger tip so no entry slips in between the sums and the recorded tip.
    head = LedgerHead.objects.select_for_update().filter(pk=1).first()
    seq_max = head.last_seq if head else 0
    entries = invoice_entries(cost_center.pk, start, end, seq_max)
    invoice = Invoice.objects.create(
        cost_center=cost_center, period_start=start, period_end=end,
        number=f"INV-{start:%Y%m}-{cost_center.code}"[:40], currency=cost_center.currency,
        total=Decimal("0.00"), ledger_seq_max=seq_max, issued_at=now, issued_by=user,
    )
    grouped = (
        entries.annotate(month=TruncMonth("hour"))
        .values("month", "team_name", "queue", "flavor", "kind", "rate_card__resource", "unit")
        .annotate(q=Sum("quantity"), a=Sum("amount"))
        .order_by("month", "team_name", "queue", "flavor", "kind", "rate_card__resource")
    )
    InvoiceLine.objects.bulk_create([
        InvoiceLine(
            invoice=invoice, adjusts="" if g["month"] == start else f"{g['month']:%Y-%m}",
            team_name=g["team_name"], queue=g["queue"], flavor=g["flavor"],
            kind=g["kind"], resource=g["rate_card__resource"], unit=g["unit"],
            quantity=g["q"], amount=g["a"],
        )
        for g in grouped
    ], batch_size=2000)
    per_workload = (
        entries.values("workload_id", "workload_name", "team_name", "queue")
        .annotate(
            # GPU-hours: lines priced per slice-hour (a MIG profile's own rate) are on the
            # invoice lines under their profile, not counted here.
            gpu=Sum("quantity", filter=Q(kind__in=["gpu_reserved", "gpu_active"],
                                         unit="GPU-hour")),
            frozen=Sum("quantity", filter=Q(kind="gpu_frozen", unit="GPU-hour")),
            a=Sum("amount"),
        )
        .order_by("team_name", "queue", "workload_id")
    )
    InvoiceWorkloadLine.objects.bulk_create([
        InvoiceWorkloadLine(
            invoice=invoice, workload_id=w["workload_id"], workload_name=w["workload_name"],
            team_name=w["team_name"], queue=w["queue"], gpu_hours=w["gpu"] or Decimal(0),
            frozen_gpu_hours=w["frozen"] or Decimal(0), amount=w["a"],
        )
        for w in per_workload
    ], batch_size=5000)
    totals = entries.aggregate(t=Sum("amount"), n=Count("pk"))
    invoice.total = totals["t"] or Decimal("0.00")
    invoice.entry_count = totals["n"]
    invoice.save(update_fields=["total", "entry_count"])
    return invoice


def invoice_entries(
    cost_center_id: int, start: datetime, end: datetime, seq_max: int
) -> QuerySet[LedgerEntry]:
    """The ledger entries an invoice for [start, end) covers, up to entry `seq_max`.

    The month's own hours, plus corrections posted since the last earlier invoice for hours of
    months already invoiced (an issued invoice is never changed: the next one carries them).
    """
    scope = Q(hour__gte=start, hour__lt=end)
    earlier = list(Invoice.objects.filter(
        cost_center_id=cost_center_id, period_start__lt=start
    ).values_list("period_start", "period_end", "ledger_seq_max"))
    floor = max((seq for _, _, seq in earlier), default=0)
    for p_start, p_end, p_seq in earlier:
        scope |= Q(hour__gte=p_start, hour__lt=p_end, seq__gt=max(p_seq, floor))
    return LedgerEntry.objects.filter(scope, cost_center_id=cost_center_id, seq__lte=seq_max)


def invoice_ledger_total(invoice: Invoice) -> Decimal:
    """The ledger's sum over what the invoice covers (what its total must equal)."""
    total = invoice_entries(
        invoice.cost_center_id, invoice.period_start, invoice.period_end,
        invoice.ledger_seq_max,
    ).aggregate(t=Sum("amount"))["t"]
    return total or Decimal("0.00")


def invoice_as_dict(invoice: Invoice) -> dict[str, Any]:
    """The invoice with its lines and appendix, as the JSON download and API give it."""
    return {
        "number": invoice.number,
        "cost_center": invoice.cost_center.code,
        "period_start": invoice.period_start.isoformat(),
        "period_end": invoice.period_end.isoformat(),
        "state": invoice.state,
        "currency": invoice.currency,
        "total": str(invoice.total),
        "ledger_seq_max": invoice.ledger_seq_max,
        "issued_at": invoice.issued_at.isoformat(),
        "lines": [
            {"adjusts": ln.adjusts, "team": ln.team_name, "queue": ln.queue,
             "flavor": ln.flavor, "kind": ln.kind, "resource": ln.resource, "unit": ln.unit,
             "quantity": str(ln.quantity), "amount": str(ln.amount)}
            for ln in invoice.lines.all()
        ],
        "workloads": [
            {"workload_id": w.workload_id, "workload": w.workload_name, "team": w.team_name,
             "queue": w.queue, "gpu_hours": str(w.gpu_hours),
             "frozen_gpu_hours": str(w.frozen_gpu_hours), "amount": str(w.amount)}
            for w in invoice.workload_lines.all()
        ],
    }


def invoice_as_csv(invoice: Invoice) -> str:
    """The invoice as CSV: a header block, the lines, the total, then the per-workload appendix."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["invoice", invoice.number, "cost_center", invoice.cost_center.code,
                     "period", f"{invoice.period_start:%Y-%m}", "currency", invoice.currency])
    writer.writerow(["adjusts", "team", "queue", "flavor", "kind", "resource", "unit",
                     "quantity", "amount"])
    for ln in invoice.lines.all():
        writer.writerow([ln.adjusts, ln.team_name, ln.queue, ln.flavor, ln.kind, ln.resource,
                         ln.unit, ln.quantity, ln.amount])
    writer.writerow(["total", "", "", "", "", "", "", "", invoice.total])
    writer.writerow([])
    writer.writerow(["workload_id", "workload", "team", "queue", "gpu_hours",
                     "frozen_gpu_hours", "amount"])
    for w in invoice.workload_lines.all():
        writer.writerow([w.workload_id, w.workload_name, w.team_name, w.queue, w.gpu_hours,
                         w.frozen_gpu_hours, w.amount])
    return out.getvalue()
