"""The billing side of /metrics (served by portal/monitoring.py): spend, budgets and how far
they are burnt, the ledger's length and its last check.

Spend is summed from the ledger per cost center and period (the `hour` index); the sums only
change when the ledger does (hourly, after metering), so they are cached under the ledger
head's sequence number and the periods' starts: a scrape reads the head row and, once an hour,
the sums.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.core.cache import cache
from django.db.models import Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from billing.models import (
    Budget,
    BudgetPeriod,
    BudgetThreshold,
    CostCenter,
    LedgerEntry,
    LedgerHead,
    LedgerVerification,
)
from billing.services.budgets import period_bounds

Sums = dict[int, Decimal]  # cost center id -> amount


def billing_families(now: datetime) -> list[Metric]:
    """Every billing family of /metrics at `now`."""
    seq = LedgerHead.objects.filter(pk=1).values_list("last_seq", flat=True).first() or 0
    entries = CounterMetricFamily("allot_ledger_entries", "Entries appended to the ledger.")
    entries.add_metric([], seq)
    spend = _spend(seq, now)
    centers = list(CostCenter.objects.values_list("id", "code", "currency"))
    code_of = {pk: code for pk, code, _ in centers}
    month = GaugeMetricFamily(
        "allot_spend_month_to_date", "What the ledger charges a cost center for the hours of "
        "the current UTC month.", labels=["cost_center", "currency"])
    for pk, code, currency in centers:
        month.add_metric([code, currency], float(spend[BudgetPeriod.MONTHLY].get(pk, 0)))
    return [entries, month, *_budget_gauges(code_of, spend), *_verification_gauges()]


def _spend(seq: int, now: datetime) -> dict[str, Sums]:
    """Spend per cost center in the current month and week (cached until the ledger grows)."""
    bounds = {period: period_bounds(period, now) for period in BudgetPeriod.values}
    key = "allot:metrics:spend:" + ":".join(
        [str(seq), *(f"{start:%Y%m%d}" for start, _ in bounds.values())])
    found = cache.get(key)
    if found is not None:
        return found
    spend: dict[str, Sums] = {}
    for period, (start, end) in bounds.items():
        rows = (LedgerEntry.objects.filter(hour__gte=start, hour__lt=end)
                .values_list("cost_center_id").annotate(t=Sum("amount")).order_by())
        spend[period] = {pk: Decimal(total or 0) for pk, total in rows}
    cache.set(key, spend, timeout=3600)
    return spend


def _budget_gauges(code_of: dict[int, str], spend: dict[str, Sums]) -> list[Metric]:
    labels = ["cost_center", "period", "currency"]
    amount = GaugeMetricFamily("allot_budget_amount", "What an active budget allows per "
                               "period.", labels=labels)
    spent = GaugeMetricFamily("allot_budget_spent", "What the cost center spent in the "
                              "budget's current period.", labels=labels)
    ratio = GaugeMetricFamily("allot_budget_used_ratio", "Spent over the budget's amount in "
                              "its current period (1: all of it).",
                              labels=["cost_center", "period"])
    reached = GaugeMetricFamily(
        "allot_budget_threshold_reached", "1 when spending this period has reached the "
        "threshold (its action applies once billing evaluates budgets, after each hour).",
        labels=["cost_center", "period", "percent", "action"])
    thresholds: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for budget_id, percent, action in BudgetThreshold.objects.filter(
            budget__active=True).values_list("budget_id", "percent", "action"):
        thresholds[budget_id].append((percent, action))
    for budget_id, cc_id, period, allowed, currency in Budget.objects.filter(
            active=True).values_list("id", "cost_center_id", "period", "amount", "currency"):
        code = code_of[cc_id]
        used = spend[period].get(cc_id, Decimal(0))
        amount.add_metric([code, period, currency], float(allowed))
        spent.add_metric([code, period, currency], float(used))
        ratio.add_metric([code, period], float(used / allowed) if allowed else 0.0)
        for percent, action in sorted(thresholds[budget_id]):
            hit = used >= allowed * percent / 100
            reached.add_metric([code, period, str(percent), action], 1.0 if hit else 0.0)
    return [amount, spent, ratio, reached]


def _verification_gauges() -> list[Metric]:
    ok = GaugeMetricFamily(
        "allot_ledger_verify_ok", "1 when the last ledger check (hash chain and invoice "
        "totals) held, 0 when it found a problem; absent before the first check.")
    ran = GaugeMetricFamily("allot_ledger_verify_timestamp_seconds",
                            "When the last ledger check ran (Unix time).")
    checked = GaugeMetricFamily("allot_ledger_verify_checked_entries",
                                "Ledger entries the last check verified.")
    last = LedgerVerification.objects.order_by("-ran_at", "-id").first()
    if last is not None:
        ok.add_metric([], 1.0 if last.ok else 0.0)
        ran.add_metric([], last.ran_at.timestamp())
        checked.add_metric([], last.checked)
    return [ok, ran, checked]
