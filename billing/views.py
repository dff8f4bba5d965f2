"""Billing pages: cost overview with charts, invoices (and downloads), reconciliation, rates."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from billing import charts, selectors
from billing.forms import day_start, parse_day
from billing.models import ReconciliationRun
from billing.services.budgets import period_bounds
from billing.services.invoices import invoice_as_csv, invoice_as_dict
from core.listing import csv_response, sort_from, wants_csv


def _days(request: HttpRequest, *names: str) -> tuple[dict[str, date], list[str]]:
    """The request's date parameters that are set, and an error for each bad one."""
    days: dict[str, date] = {}
    errors: list[str] = []
    for name in names:
        value = request.GET.get(name)
        if not value:
            continue
        try:
            days[name] = parse_day(value, name)
        except ValidationError as exc:
            errors += [f"{name}: {m}" for m in exc.message_dict[name]]
    return days, errors


def _chart(key: str, title: str, figure: dict) -> dict:
    return {"id": f"chart-{key}", "data_id": f"chart-{key}-data", "title": title,
            "json": figure}


# The usage table's sortable columns (?sort=col / -col; "name": the team, queue or GPU model)
# and its CSV columns (?format=csv; the first is the grouping's name).
USAGE_SORT = {"name": ("name",), "reserved": ("reserved_gpu_hours",),
              "frozen": ("frozen_gpu_hours",), "active": ("active_gpu_hours",),
              "efficiency": ("efficiency",), "unmetered": ("gap_gpu_hours",),
              "core_hours": ("core_hours",), "cost": ("cost",)}
USAGE_CSV = ("reserved_gpu_hours", "frozen_gpu_hours", "active_gpu_hours", "efficiency",
             "gap_gpu_hours", "core_hours", "billed", "provisional", "cost", "currency")


def _usage_csv(rows: list[dict], group_by: str, start: datetime,
               end: datetime) -> HttpResponseBase:
    return csv_response(f"usage-by-{group_by}-{start:%Y%m%d}-{end:%Y%m%d}.csv",
                        (group_by, *USAGE_CSV),
                        ((r[group_by], *(r[c] for c in USAGE_CSV)) for r in rows))


@login_required
def overview(request: HttpRequest) -> HttpResponseBase:
    """Cost over a date range (default: month to date) for the teams the user may see; the
    usage table sortable (?sort=) and as CSV (?format=csv)."""
    now = timezone.now()
    month_start, _ = period_bounds("monthly", now)
    # A bad date is a 400 that says which and why, showing the default period meanwhile.
    days, errors = _days(request, "from", "to")
    start = day_start(days["from"]) if "from" in days else month_start
    end = day_start(days["to"]) + timedelta(days=1) if "to" in days else now
    group_by = request.GET.get("group_by", "team")
    if group_by not in selectors.GROUPS:
        group_by = "team"
    user = request.user
    sort = sort_from(request, USAGE_SORT, "name")
    rows = selectors.usage_summary(user=user, group_by=group_by, start=start, end=end, now=now)
    if not (sort.column == "name" and not sort.descending):
        rows = sort.rows_sorted(rows, lambda r, f: r[group_by] if f == "name" else r[f])
    if wants_csv(request) and not sort.error and not errors:
        return _usage_csv(rows, group_by, start, end)
    currency = selectors.default_currency()
    gpu_series = selectors.gpu_hours_daily(user=user, start=start, end=end)
    top = selectors.top_workloads(user=user, start=start, end=end)
    figures = [
        _chart("spend", "Spend by team", charts.spend_by_team_figure(
            selectors.spend_by_team_daily(user=user, start=start, end=end), currency)),
        _chart("gpuhours", "Reserved vs active GPU-hours",
               charts.reserved_vs_active_figure(gpu_series)),
        _chart("frozen", "Frozen cost", charts.frozen_cost_figure(gpu_series, currency)),
        _chart("top", "Top workloads", charts.top_workloads_figure(top, currency)),
    ]
    idle = None
    if selectors.is_admin(user):
        idle = selectors.idle_capacity_cost(start=start, end=end, now=now)
        figures.append(_chart("idle", "Idle capacity cost", charts.idle_cost_figure(idle)))
    budgets = []
    for budget in selectors.visible_budgets(user):
        status = selectors.budget_status(budget, now)
        budgets.append(status)
        figures.append(_chart(f"burn-{budget.pk}", f"Budget {budget.cost_center.code}",
                              charts.burndown_figure(selectors.budget_burndown(budget, now),
                                                     budget.currency)))
    return render(request, "billing/overview.html", {
        "rows": rows, "sort": sort, "group_by": group_by, "start": start, "end": end,
        "figures": figures,
        "budgets": budgets, "idle": idle, "top": top, "currency": currency,
        "is_admin": selectors.is_admin(user), "errors": errors,
    }, status=400 if errors or sort.error else 200)


# The invoice list's sortable columns (?sort=col / -col).
INVOICE_SORT = {"number": ("number",), "cost_center": ("cost_center__code",),
                "month": ("period_start",), "total": ("total",), "issued": ("issued_at",)}


@login_required
def invoice_list(request: HttpRequest) -> HttpResponseBase:
    """Invoices the user may see (admins, and leads of the cost center's teams)."""
    sort = sort_from(request, INVOICE_SORT, "-month")
    invoices = selectors.visible_invoices(request.user).select_related("cost_center").order_by(
        *sort.order_by(), "pk")
    if wants_csv(request) and not sort.error:
        return csv_response("invoices.csv", ("number", "cost_center", "month", "total",
                                             "currency", "issued_at"), (
            (i.number, i.cost_center.code, i.period_start.strftime("%Y-%m"), i.total,
             i.currency, i.issued_at.isoformat() if i.issued_at else "")
            for i in invoices.iterator(chunk_size=2000)))
    return render(request, "billing/invoice_list.html",
                  {"invoices": invoices[:500], "sort": sort},
                  status=400 if sort.error else 200)


@login_required
def invoice_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """An invoice: lines per team/queue/flavor/kind and the per-workload appendix."""
    invoice = get_object_or_404(selectors.visible_invoices(request.user), pk=pk)
    return render(request, "billing/invoice_detail.html", {
        "invoice": invoice, "lines": invoice.lines.all(),
        "workloads": invoice.workload_lines.all()[:5000],
    })


@login_required
def invoice_download(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """The invoice as a CSV or JSON file."""
    if fmt not in ("csv", "json"):
        raise Http404("unknown format")
    invoice = get_object_or_404(selectors.visible_invoices(request.user), pk=pk)
    if fmt == "csv":
        response = HttpResponse(invoice_as_csv(invoice), content_type="text/csv")
    else:
        response = JsonResponse(invoice_as_dict(invoice))
    response["Content-Disposition"] = f'attachment; filename="{invoice.number}.{fmt}"'
    return response


@login_required
def reconciliation(request: HttpRequest) -> HttpResponse:
    """The daily reconciliation: billed without telemetry, telemetry without admission, gaps."""
    if not selectors.is_admin(request.user):
        raise Http404("not found")
    days, errors = _days(request, "day")
    runs = ReconciliationRun.objects.all()[:31]
    run = (ReconciliationRun.objects.filter(day=days["day"]).first() if days
           else selectors.latest_reconciliation())
    return render(request, "billing/reconciliation.html", {
        "run": run, "runs": runs, "findings": run.findings.all() if run else [],
        "errors": errors,
    }, status=400 if errors else 200)


@login_required
def rates(request: HttpRequest) -> HttpResponse:
    """Every rate card version."""
    return render(request, "billing/rates.html", {"cards": selectors.rate_cards()})


@login_required
def workload_costs(request: HttpRequest, workload_id: int) -> HttpResponse:
    """Why a workload cost what it did: its hours, phases, telemetry and ledger lines."""
    workload = selectors.visible_workload(request.user, workload_id)
    if workload is None:
        raise Http404("not found")
    return render(request, "billing/workload_costs.html", {
        "workload": workload, "cost": selectors.workload_cost(workload),
        **selectors.workload_charges(workload),
    })
