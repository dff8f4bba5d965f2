"""Rates in force at a moment: an open admission's hourly cost, and the rate card list."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet

from billing.models import RateCard
from billing.selectors.cost_centers import default_currency
from core.quantity import amounts, card_equivalent


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


def request_cost_estimate(flavor: str, pods: list[dict], now: datetime):
    """What a request (the submission's pod sets: count, gpus, cpu, memory_gib and extended
    `resources` as stored, integers of the base unit) would cost per hour on `flavor` once it
    runs, priced as metering prices it: a fraction of a card as that fraction, a MIG slice
    as its GPU-equivalent, at the flavor's GPU rate. None when the flavor has no rate yet."""
    from billing.services.usage import rate_versions
    from quotas.models import Flavor
    from scheduling.extensions import CostEstimate

    rates = rate_versions()
    if flavor not in rates:
        return None
    equivalents = Flavor.objects.filter(name=flavor).values_list(
        "gpu_equivalents", flat=True).first()
    cards = cpu = memory = Decimal(0)
    for p in pods:
        count = int(p["count"])
        slices = sum((amount * card_equivalent(name, equivalents)
                      for name, amount in amounts(p.get("resources") or {}).items()),
                     Decimal(0))
        cards += count * (Decimal(str(p["gpus"])) + slices)
        cpu += count * Decimal(str(p.get("cpu") or 0))
        memory += count * Decimal(str(p.get("memory_gib") or 0))
    per_hour, currency = Decimal(0), default_currency()
    for resource, amount in (("gpu", cards), ("cpu", cpu), ("memory", memory)):
        version = rate_at(rates, flavor, resource, now)
        if version is not None and amount:
            per_hour += amount * version.rate
            currency = version.currency
    return CostEstimate(per_hour=per_hour, currency=currency,
                        cards=cards.quantize(Decimal("0.001")))


def rate_cards() -> QuerySet:
    """Every rate card version, newest first per flavor and resource."""
    return RateCard.objects.select_related("flavor").order_by(
        "flavor__name", "resource", "-version")
