"""Pricing arithmetic: one usage record and the rate card versions in force -> charge lines.

Pure Python. A record's interval is cut where a new rate version takes effect, so a rate change
mid-hour prices each part at its own version. Rounding: each line's quantity to 4 places, its
amount = round(quantity x rate, cents), half-even. On the usage basis the active GPU-hours of a
segment cut by a rate change are shared between the parts in proportion to their time (the
hourly record keeps no per-minute split).

GPU time is priced in parts (QUOTA-SEMANTICS §10): by default every card, fraction and MIG slice
(as its GPU-equivalent) at the flavor's `gpu` rate per GPU-hour; a flavor's `gpu-fraction` rate
prices the fractions of a card instead, and a rate for one MIG profile (`nvidia.com/mig-1g.10gb`)
prices each slice of it per slice-hour. Before an override's first version its part falls back
to the `gpu` rate. On the usage basis each part takes its share of the active GPU-hours in
proportion to the cards it holds.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
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
    fraction_gpus: Decimal = Decimal(0)  # the part of `gpus` held as fractions of a card
    # MIG slices per profile: (instances, cards); their cards are part of `gpu_equivalents`.
    slices: Mapping[str, tuple[Decimal, Decimal]] = field(default_factory=dict)


FRACTION = "gpu-fraction"


@dataclass(frozen=True)
class GpuPart:
    """GPU time held, as one rate prices it: `quantity` per hour in the rate's unit (cards for
    `gpu` and `gpu-fraction`, instances for a MIG profile), worth `cards`."""

    resource: str
    quantity: Decimal
    cards: Decimal


def gpu_parts(gpus: Decimal, gpu_equivalents: Decimal, fraction_gpus: Decimal,
              slices: Mapping[str, tuple[Decimal, Decimal]],
              priced: Container[str]) -> list[GpuPart]:
    """What is held split by the rate that prices it: fractions under `gpu-fraction` and each
    MIG profile under its own rate when `priced` has one, everything else (whole cards and
    the rest as GPU-equivalents) under `gpu`, first."""
    out: list[GpuPart] = []
    fraction = Decimal(fraction_gpus)
    if fraction and FRACTION in priced:
        out.append(GpuPart(FRACTION, fraction, fraction))
    for name, (count, cards) in sorted(slices.items()):
        if name in priced and count:
            out.append(GpuPart(name, Decimal(count), Decimal(cards)))
    rest = Decimal(gpus) + Decimal(gpu_equivalents) - sum((p.cards for p in out), Decimal(0))
    return [GpuPart("gpu", rest, rest), *out] if rest > 0 else out


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


def _part_pieces(start: datetime, end: datetime, part: GpuPart,
                 rates: Mapping[str, Sequence[RateVersion]]
                 ) -> list[tuple[datetime, datetime, RateVersion, Decimal]]:
    """[start, end) of one part cut at rate versions, with its quantity per hour in that
    version's unit: an override's own versions, and the `gpu` rate (its cards) before them."""
    if part.resource == "gpu":
        return [(s, e, v, part.quantity) for s, e, v in pieces(start, end, rates.get("gpu", ()))]
    own = rates.get(part.resource, ())
    first = min(v.effective_from for v in own)
    out = [(s, e, v, part.cards)
           for s, e, v in pieces(start, min(end, first), rates.get("gpu", ()))]
    return out + [(s, e, v, part.quantity) for s, e, v in pieces(start, end, own)]


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
    priced = {name for name, versions in rates.items() if versions and name != "gpu"}
    gpu: dict[tuple[str, int], tuple[Decimal, RateVersion, Decimal]] = {}

    def add(kind: str, quantity: Decimal, version: RateVersion, rate: Decimal) -> None:
        # One line per kind and rate version (a fallback part and the `gpu` part share one).
        old = gpu.get((kind, version.id), (Decimal(0), version, rate))[0]
        gpu[(kind, version.id)] = (old + quantity, version, rate)

    parts = gpu_parts(usage.gpus, usage.gpu_equivalents, usage.fraction_gpus, usage.slices,
                      priced) if cards else []
    for part in parts:
        for s, e, v, quantity in _part_pieces(usage.start, usage.end, part, rates):
            hours = exact_hours(e - s)
            reserved = quantity * hours
            if frozen:
                add("gpu_frozen", reserved, v, v.frozen_rate)
                continue
            share = {"allocation": Decimal(0), "usage": Decimal(1)}.get(basis, usage_share)
            if share < 1:
                add("gpu_reserved", (1 - share) * reserved, v, v.rate)
            if share > 0:
                # Minutes without telemetry are billed as reserved, never as zero activity.
                metered = (usage.active_gpu_hours or Decimal(0)) + usage.gap_gpu_hours
                part_of = metered * hours / total_hours if total_hours else Decimal(0)
                if quantity != cards:  # this part's share of the activity, in its unit
                    part_of = part_of * quantity / cards
                add("gpu_active", share * part_of, v, v.rate)
    lines += [_line(kind, q, v, rate) for (kind, _), (q, v, rate) in gpu.items()]
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
