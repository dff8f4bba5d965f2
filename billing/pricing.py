"""Pricing arithmetic: one usage record and the rate card versions in force -> charge lines.

Pure Python. A record's interval is cut where a new rate version takes effect, so a rate change
mid-hour prices each part at its own version. Rounding: each line's quantity to 4 places, its
amount = round(quantity x rate, cents), half-even. On the usage basis the active GPU-hours of a
segment cut by a rate change are shared between the parts in proportion to their time (the
hourly record keeps no per-minute split).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.metering import exact_hours
from billing.models import round_money, round_quantity


@dataclass(frozen=True)
class RateVersion:
    """A rate card version as pricing needs it."""

    id: int
    resource: str
    version: int
    effective_from: datetime
    rate: Decimal
    frozen_rate: Decimal
    unit: str
    currency: str


@dataclass(frozen=True)
class UsageInput:
    """The parts of a usage record that pricing reads."""

    phase: str
    start: datetime
    end: datetime
    gpus: Decimal
    cpu: Decimal
    memory_gib: Decimal
    active_gpu_hours: Decimal | None
    gap_gpu_hours: Decimal
    gpu_equivalents: Decimal = Decimal(0)  # MIG slices as cards, priced at the GPU rate


@dataclass(frozen=True)
class ChargeLine:
    """A priced line, ready to become a ledger entry."""

    kind: str
    quantity: Decimal
    unit: str
    rate_card_id: int
    rate_version: int
    rate: Decimal
    amount: Decimal
    currency: str


def pieces(
    start: datetime, end: datetime, versions: Sequence[RateVersion]
) -> list[tuple[datetime, datetime, RateVersion]]:
    """[start, end) cut at version boundaries; parts before the first version are unpriced."""
    ordered = sorted(versions, key=lambda v: v.effective_from)
    out = []
    for i, version in enumerate(ordered):
        v_end = ordered[i + 1].effective_from if i + 1 < len(ordered) else None
        s = max(start, version.effective_from)
        e = end if v_end is None else min(end, v_end)
        if e > s:
            out.append((s, e, version))
    return out


def _line(kind: str, quantity: Decimal, version: RateVersion, rate: Decimal) -> ChargeLine:
    q = round_quantity(quantity)
    return ChargeLine(
        kind=kind, quantity=q, unit=version.unit, rate_card_id=version.id,
        rate_version=version.version, rate=rate, amount=round_money(q * rate),
        currency=version.currency,
    )


def price_usage(
    usage: UsageInput,
    rates: Mapping[str, Sequence[RateVersion]],
    *,
    basis: str,
    usage_share: Decimal,
) -> list[ChargeLine]:
    """The charge lines of one usage record under a cost center's basis (zero lines dropped)."""
    lines: list[ChargeLine] = []
    total_hours = exact_hours(usage.end - usage.start)
    frozen = usage.phase == "frozen"
    cards = usage.gpus + usage.gpu_equivalents
    if cards:
        for s, e, v in pieces(usage.start, usage.end, rates.get("gpu", ())):
            hours = exact_hours(e - s)
            reserved = cards * hours
            if frozen:
                lines.append(_line("gpu_frozen", reserved, v, v.frozen_rate))
                continue
            share = {"allocation": Decimal(0), "usage": Decimal(1)}.get(basis, usage_share)
            if share < 1:
                lines.append(_line("gpu_reserved", (1 - share) * reserved, v, v.rate))
            if share > 0:
                # Minutes without telemetry are billed as reserved, never as zero activity.
                metered = (usage.active_gpu_hours or Decimal(0)) + usage.gap_gpu_hours
                part = metered * hours / total_hours if total_hours else Decimal(0)
                lines.append(_line("gpu_active", share * part, v, v.rate))
    for resource, amount, kind in (
        ("cpu", usage.cpu, "cpu"),
        ("memory", usage.memory_gib, "memory"),
    ):
        if not amount:
            continue
        for s, e, v in pieces(usage.start, usage.end, rates.get(resource, ())):
            quantity = Decimal(amount) * exact_hours(e - s)
            if frozen:
                lines.append(_line(f"{kind}_frozen", quantity, v, v.frozen_rate))
            else:
                lines.append(_line(kind, quantity, v, v.rate))
    return [line for line in lines if line.quantity]
