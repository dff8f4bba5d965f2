"""Metered so far: what admissions have cost since the last hourly rollup covered them.

The hourly rollup (`usage_rollup_hour`) prices each complete hour into usage records and
ledger entries. Until it has run for an hour, the pages would show nothing for it: a workload
that just finished would drop to 0.00, a month to date would stay flat while work runs. This
module prices that not-yet-rolled-up time straight from the admissions (reserved at the frozen
rate until the pods run, then the running rate, at the rates in force now), and the pages show
it as provisional until the rollup replaces it with billed hours.

An admission's time is covered up to the end of the last hour the rollup recorded for it;
before its first record, nothing of it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Max, OuterRef, Q, Subquery, Sum

from billing.metering import HOUR, exact_hours
from billing.models import UsageRecord, round_money
from billing.selectors.cost_centers import default_currency
from billing.selectors.rates import gpu_hourly_cost, rate_at
from billing.services.usage import admission_shapes, rate_versions

ZERO = Decimal(0)


@dataclass(frozen=True)
class Provisional:
    """Metered-so-far cost and GPU-hours not yet rolled up."""

    cost: Decimal
    gpu_hours: Decimal
    currency: str


def _priced(adm: Any, start: datetime, end: datetime, rates: dict, now: datetime,
            shapes: Any = None) -> tuple[Decimal, Decimal, str | None]:
    """(cost, GPU-hours, currency) of one admission over [start, end); `shapes`: its fractions
    and MIG slices (`admission_shapes`), counted and priced as the hourly rollup does."""
    if end <= start:
        return ZERO, ZERO, None
    running_from = adm.running_at if adm.running_at is not None else end
    frozen_h = exact_hours(max(start, min(end, running_from)) - start)
    running_h = exact_hours(end - max(start, min(end, running_from)))
    slices = shapes.slice_cards if shapes is not None else ZERO
    cards = Decimal(adm.gpus) + slices
    running, currency = gpu_hourly_cost(rates, adm.flavor.name, adm.gpus, shapes, now)
    held, _ = gpu_hourly_cost(rates, adm.flavor.name, adm.gpus, shapes, now, frozen=True)
    cost = running * running_h + held * frozen_h
    for resource, amount in (("cpu", adm.cpu), ("memory", adm.memory_gib)):
        version = rate_at(rates, adm.flavor.name, resource, now)
        if version is None or not amount:
            continue
        cost += Decimal(amount) * (version.rate * running_h + version.frozen_rate * frozen_h)
        currency = version.currency
    return cost, cards * running_h, currency


def provisional_by(admissions: Any, *, now: datetime, since: datetime | None = None,
                   until: datetime | None = None, key: Callable[[Any], str] | None = None
                   ) -> dict[str, Provisional]:
    """The not-yet-rolled-up cost of `admissions` (a queryset of `scheduling.Admission`) over
    [since, min(until, now)), per `key(admission)` ("" for all): one query for the
    admissions, their workloads and their covered hours. The one computation of provisional
    cost: a workload's, a team's month to date and the usage rows per team, queue or flavor
    all come from it."""
    last = (UsageRecord.objects.filter(admission_id=OuterRef("pk")).values("admission_id")
            .annotate(h=Max("hour")).values("h"))
    rows = admissions.select_related("flavor", "workload__team", "workload__queue").annotate(
        covered=Subquery(last[:1]))
    rates = rate_versions()
    stop = now if until is None else min(now, until)
    sums: dict[str, list[Any]] = {}
    rows = list(rows)
    shapes = admission_shapes(rows)
    for adm in rows:
        start = adm.reserved_at
        if adm.covered is not None:
            start = max(start, adm.covered + HOUR)
        if since is not None:
            start = max(start, since)
        end = min(adm.ended_at or stop, stop)
        c, h, cur = _priced(adm, start, end, rates, now, shapes.get(adm.pk))
        group = sums.setdefault("" if key is None else key(adm), [ZERO, ZERO, None])
        group[0] += c
        group[1] += h
        group[2] = cur or group[2]
    return {k: Provisional(cost=round_money(c), gpu_hours=h, currency=cur or default_currency())
            for k, (c, h, cur) in sums.items()}


def provisional_of(admissions: Any, *, now: datetime, since: datetime | None = None
                   ) -> Provisional:
    """The not-yet-rolled-up cost of `admissions` from `since` (e.g. the month's start) to
    now, all together (`provisional_by`)."""
    return provisional_by(admissions, now=now, since=since).get("") or Provisional(
        cost=round_money(ZERO), gpu_hours=ZERO, currency=default_currency())


def workload_provisional(workload: Any, *, now: datetime) -> Provisional:
    """A workload's metered-so-far cost, every admission (open or ended) included."""
    return provisional_of(workload.admissions.all(), now=now)


def team_provisional(team: Any, *, since: datetime, now: datetime) -> Provisional:
    """A team's metered-so-far cost since `since`: admissions still open or ended after it."""
    from scheduling.models import Admission

    return provisional_of(
        Admission.objects.filter(workload__team=team).filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=since)),
        now=now, since=since)


@dataclass(frozen=True)
class Spend:
    """A cost center's spend over a period: `billed` (its ledger), `provisional` (metered
    since the last rollup covered it, `provisional_by`) and `spent`, their sum."""

    billed: Decimal
    provisional: Decimal

    @property
    def spent(self) -> Decimal:
        return round_money(self.billed + self.provisional)


def cost_center_admissions(cost_center_id: int) -> Any:
    """The admissions a cost center pays for, by the rule the hourly rollup prices them with
    (`team_cost_centers`): its teams', and for the default cost center also those of teams
    without one and of workloads without a team."""
    from billing.models import CostCenter, TeamCostCenter
    from scheduling.models import Admission

    teams = TeamCostCenter.objects.filter(cost_center_id=cost_center_id).values("team_id")
    mine = Q(workload__team_id__in=teams)
    if CostCenter.objects.filter(pk=cost_center_id, is_default=True).exists():
        mine |= Q(workload__team__isnull=True) | ~Q(
            workload__team_id__in=TeamCostCenter.objects.values("team_id"))
    return Admission.objects.filter(mine)


def cost_center_spend(cost_center_id: int, start: datetime, end: datetime, *,
                      now: datetime) -> Spend:
    """What a cost center spent in [start, end): its ledger for those hours plus the
    provisional cost of its admissions over the part of the period up to `now` that the
    rollup has not priced yet. The one figure budgets, their thresholds, the forecast, the
    banner, the submission check and the cost-center rules read."""
    from billing.models import LedgerEntry

    billed = LedgerEntry.objects.filter(
        cost_center_id=cost_center_id, hour__gte=start, hour__lt=end
    ).aggregate(t=Sum("amount"))["t"]
    provisional = ZERO
    if start < now:
        admissions = cost_center_admissions(cost_center_id).filter(reserved_at__lt=end).filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        part = provisional_by(admissions, now=now, since=start, until=end).get("")
        provisional = part.cost if part is not None else ZERO
    return Spend(billed=round_money(Decimal(billed or 0)), provisional=round_money(provisional))
