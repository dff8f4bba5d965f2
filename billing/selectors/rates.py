"""Rates in force at a moment: an open admission's hourly cost, and the rate card list."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from billing.models import RateCard
from billing.pricing import gpu_parts
from billing.selectors.cost_centers import default_currency
from core.quantity import amounts, card_equivalent


def rate_at(rates: dict, flavor: str, resource: str, now: datetime):
    """The rate version in force at `now` (None before the first)."""
    current = None
    for version in rates.get(flavor, {}).get(resource, ()):
        if version.effective_from <= now:
            current = version
    return current


def gpu_hourly_cost(rates: dict, flavor: str, gpus: Decimal, shapes: Any, now: datetime,
                    *, frozen: bool = False) -> tuple[Decimal, str | None]:
    """What GPU time costs per hour at the rates in force at `now`, priced as metering prices
    it (`billing.pricing.gpu_parts`): fractions at the flavor's `gpu-fraction` rate and each
    MIG profile at its own rate per slice where they have one, the rest at the `gpu` rate.
    `shapes`: a `billing.services.usage.Shapes` (None: whole cards only)."""
    fraction = shapes.fraction_gpus if shapes is not None else Decimal(0)
    slices = shapes.slices if shapes is not None else {}
    equivalents = shapes.slice_cards if shapes is not None else Decimal(0)
    in_force = {name for name in rates.get(flavor, {})
                if name != "gpu" and rate_at(rates, flavor, name, now) is not None}
    per_hour, currency = Decimal(0), None
    for part in gpu_parts(Decimal(gpus), equivalents, fraction, slices, in_force):
        version = rate_at(rates, flavor, part.resource, now)
        if version is not None and part.quantity:
            per_hour += part.quantity * (version.frozen_rate if frozen else version.rate)
            currency = version.currency
    return per_hour, currency


def admission_hourly_cost(adm, rates: dict, now: datetime,
                          shapes: Any = None) -> tuple[Decimal, str]:
    """What an open admission costs per hour at today's rates (frozen rate until it runs);
    `shapes`: its fractions and MIG slices (`admission_shapes`), priced as metering prices
    them."""
    per_hour, currency = gpu_hourly_cost(rates, adm.flavor.name, adm.gpus, shapes, now,
                                         frozen=not adm.running_at)
    currency = currency or default_currency()
    for resource, amount in (("cpu", adm.cpu), ("memory", adm.memory_gib)):
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
    as its GPU-equivalent, at the flavor's GPU rate (or its `gpu-fraction` and per-profile
    rates where it has them). None when the flavor has no rate yet."""
    from billing.services.usage import Shapes, rate_versions
    from quotas.models import Flavor
    from scheduling.extensions import CostEstimate

    rates = rate_versions()
    if flavor not in rates:
        return None
    equivalents = Flavor.objects.filter(name=flavor).values_list(
        "gpu_equivalents", flat=True).first()
    gpus = cpu = memory = fraction = Decimal(0)
    slices: dict[str, tuple[Decimal, Decimal]] = {}
    for p in pods:
        count = int(p["count"])
        per_pod = Decimal(str(p["gpus"]))
        gpus += count * per_pod
        if 0 < per_pod < 1:
            fraction += count * per_pod
        for name, amount in amounts(p.get("resources") or {}).items():
            per = card_equivalent(name, equivalents)
            if per:
                held, worth = slices.get(name, (Decimal(0), Decimal(0)))
                slices[name] = (held + count * amount, worth + count * amount * per)
        cpu += count * Decimal(str(p.get("cpu") or 0))
        memory += count * Decimal(str(p.get("memory_gib") or 0))
    shapes = Shapes(fraction_gpus=fraction, slices=slices)
    cards = gpus + shapes.slice_cards
    gpu_cost, gpu_currency = gpu_hourly_cost(rates, flavor, gpus, shapes, now)
    per_hour, currency = gpu_cost, gpu_currency or default_currency()
    for resource, amount in (("cpu", cpu), ("memory", memory)):
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
