"""Celery tasks: they pick the hours or days, call a service, and retry. No logic here."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from billing.prometheus import TelemetryUnavailable, default_client, fetch_session_utilisation
from billing.services import budgets_evaluate, ledger_check, reconciliation_run, rollup_and_post
from billing.services.usage import hours_due
from scheduling.selectors import pod_owners
from scheduling.session_time import sessions_time_limit
from scheduling.sessions import sessions_cull, simulated_utilisation

logger = logging.getLogger(__name__)


@shared_task(
    bind=True, autoretry_for=(TelemetryUnavailable,), retry_backoff=60, max_retries=10,
    name="billing.rollup_recent_hours",
)
def rollup_recent_hours(self) -> dict:
    """Meter and price the hours due (idempotent), then evaluate budgets."""
    now = timezone.now()
    hours = hours_due(now=now)
    appended = 0
    for hour in hours:
        _, posted = rollup_and_post(hour=hour, now=now)
        appended += posted.appended
    fired = budgets_evaluate(now=now)
    return {"hours": len(hours), "last": hours[-1].isoformat(), "appended": appended,
            "fired": len(fired)}


@shared_task(name="billing.evaluate_budgets")
def evaluate_budgets() -> dict:
    """Fire the budget thresholds reached by billed plus provisional spend (between rollups)."""
    return {"fired": len(budgets_evaluate(now=timezone.now()))}


@shared_task(name="billing.cull_idle_sessions")
def cull_idle_sessions() -> dict:
    """Warn and stop interactive sessions at their time limit (scheduling/session_time.py), and
    those whose GPUs stayed idle (scheduling/sessions.py), from the telemetry metering reads:
    Prometheus, else the simulated clusters' exporters."""
    now = timezone.now()
    client = default_client()

    def utilisation(sessions: list) -> dict:
        if client is None:
            return simulated_utilisation(sessions, now)
        try:
            return fetch_session_utilisation(client, {w.pk for w in sessions}, now,
                                             pod_owners(now - timedelta(minutes=1), now))
        except TelemetryUnavailable as exc:  # no reading: nothing changes
            logger.warning("idle sessions: %s", exc)
            return {}

    timed = sessions_time_limit(now=now)
    report = sessions_cull(utilisation=utilisation, now=now)
    return {"sessions": report.sessions, "read": report.read, "warned": report.warned,
            "stopped": report.stopped, "time_warned": timed.warned, "timed_out": timed.stopped}


@shared_task(name="billing.reconcile_yesterday")
def reconcile_yesterday() -> dict:
    """The daily reconciliation of the previous UTC day."""
    day = (timezone.now() - timedelta(days=1)).date()
    run = reconciliation_run(day=day)
    return {"day": day.isoformat(), "findings": run.findings_count}


@shared_task(name="billing.verify_ledger")
def verify_ledger() -> dict:
    """The daily ledger check (hash chain and invoice totals), recorded for /metrics."""
    check = ledger_check()
    return {"ok": check.ok, "checked": check.checked, "problem": check.problem}


@shared_task(name="billing.issue_last_month_invoices")
def issue_last_month_invoices() -> dict:
    """Issue last month's invoice for every cost center that has none yet."""
    from billing.models import CostCenter, Invoice
    from billing.services import invoice_issue

    now = timezone.now()
    month = (now.replace(day=1) - timedelta(days=1)).date()
    issued = []
    for cc in CostCenter.objects.all():
        done = Invoice.objects.filter(
            cost_center=cc, period_start__year=month.year, period_start__month=month.month
        ).exists()
        if not done:
            issued.append(invoice_issue(cost_center=cc, month=month, now=now).number)
    return {"month": f"{month:%Y-%m}", "issued": issued}
