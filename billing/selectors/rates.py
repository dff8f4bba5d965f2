"""Rates in force at a moment: an open admission's hourly cost, and the rate card list."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet

from billing.models import RateCard
from billing.selectors.cost_centers import default_currency


def rate_at(rates: dict, flavor: str, resource: str, now: datetime):
    """The rate version in force at `now` (None before the first)."""
    current = None
    for version in rates.get(flavor, {}).get(resource, ()):
        if version.effective_from <= now:
            current = version
    return current


def admission_hourly_cost(adm, rates: dict, now: datetime,
                          slices: Decimal = Decimal(0)) -> tuple[Decimal, str]:
    """What an open admission costs per hour at today's rates (frozen rate until it runs);
    `slices`: its MIG slices as cards (`slice_cards`), priced at the GPU rate as metering
    prices them."""
    per_hour = Decimal(0)
    currency = default_currency()
    for resource, amount in (("gpu", Decimal(adm.gpus) + slices), ("cpu", adm.cpu),
                             ("memory", adm.memory_gib)):
        version = rate_at(rates, adm.flavor.name, resource, now)
        if version is not None and amount:
            rate = version.rate if adm.running_at else version.frozen_rate
            per_hour += Decimal(amount) * rate
            currency = version.currency
    return per_hour, currency


def rate_cards() -> QuerySet:
    """Every rate card version, newest first per flavor and resource."""
    return RateCard.objects.select_related("flavor").order_by(
        "flavor__name", "resource", "-version")
