"""Rate cards and cost centers."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from billing.metering import HOUR
from billing.models import (
    SLICE_UNIT,
    UNITS,
    BillableResource,
    ChargeBasis,
    CostCenter,
    LedgerEntry,
    RateCard,
    TeamCostCenter,
)
from core.quantity import card_equivalent, equivalents


def rate_unit(flavor, resource: str) -> str:  # flavor: quotas.Flavor
    """The unit a rate for `resource` on `flavor` prices (ValidationError naming the resources
    it may be when it is none of them)."""
    if resource in BillableResource.values:
        return UNITS[BillableResource(resource)]
    if card_equivalent(resource, flavor.gpu_equivalents) > 0:
        return SLICE_UNIT
    profiles = sorted(k for k, v in equivalents(flavor.gpu_equivalents).items() if v > 0)
    raise ValidationError({"resource": [
        f"unknown resource {resource!r} for flavor {flavor.name}: expected gpu, cpu, memory, "
        f"gpu-fraction or a MIG profile with a GPU-equivalent on the flavor ("
        f"{', '.join(profiles) or 'a mig-Ng.* name such as nvidia.com/mig-1g.10gb'})"]})


@transaction.atomic
def rate_card_create(
    *,
    flavor,  # quotas.Flavor
    resource: str,
    rate: Decimal,
    effective_from: datetime,
    currency: str = "EUR",
    frozen_rate: Decimal | None = None,
    note: str = "",
    user=None,
) -> RateCard:
    """Add the next version of a flavor's rate for a resource, effective from a moment on.

    `resource` is `gpu`, `cpu`, `memory`, `gpu-fraction` (fractions of a card, per GPU-hour,
    in place of the `gpu` rate) or a MIG profile the flavor gives a GPU-equivalent (its
    `gpu_equivalents`, or `mig-Ng.*`), priced per slice-hour in place of its GPU-equivalent
    at the `gpu` rate. Refused when it would reach back into hours already in the ledger (a
    change never rewrites past charges) or before the current version's start.
    """
    resource = str(resource).strip()
    unit = rate_unit(flavor, resource)
    errors: dict[str, list[str]] = {}
    for name, value in (("rate", rate), ("frozen_rate", frozen_rate)):
        if value is not None and Decimal(value) < 0:
            errors[name] = [f"must be 0 or more (got {Decimal(value).normalize():f} "
                            f"{currency.upper()} per {unit})"]
    if errors:
        raise ValidationError(errors)
    rate = Decimal(rate)
    if effective_from.tzinfo is None:
        raise ValidationError({"effective_from": ["must be timezone-aware (UTC)"]})
    # Lock this flavor's versions so two concurrent changes cannot both take version n+1.
    current = list(
        RateCard.objects.select_for_update()
        .filter(flavor=flavor, resource=resource)
        .order_by("-version")[:1]
    )
    if current and effective_from <= current[0].effective_from:
        raise ValidationError({"effective_from": [
            f"{effective_from.isoformat()} is not after version {current[0].version}'s start "
            f"{current[0].effective_from.isoformat()}"
        ]})
    last_billed = LedgerEntry.objects.filter(flavor=flavor.name).aggregate(h=Max("hour"))["h"]
    if last_billed is not None and effective_from < last_billed + HOUR:
        raise ValidationError({"effective_from": [
            f"{effective_from.isoformat()} falls in hours already billed (up to "
            f"{(last_billed + HOUR).isoformat()}): a rate change never rewrites past charges"
        ]})
    return RateCard.objects.create(
        flavor=flavor, resource=resource, version=(current[0].version + 1) if current else 1,
        effective_from=effective_from, rate=rate,
        frozen_rate=None if frozen_rate is None else Decimal(frozen_rate),
        unit=unit, currency=currency.upper(), note=note,
        created_by=user,
    )


@transaction.atomic
def cost_center_create(
    *,
    code: str,
    name: str,
    charge_basis: str = ChargeBasis.ALLOCATION,
    usage_share: Decimal = Decimal("0.50"),
    currency: str = "EUR",
    contact_email: str = "",
    is_default: bool = False,
) -> CostCenter:
    """Create a cost center (validated)."""
    cc = CostCenter(
        code=code, name=name, charge_basis=charge_basis, usage_share=Decimal(usage_share),
        currency=currency.upper(), contact_email=contact_email, is_default=is_default,
    )
    cc.full_clean()
    cc.save()
    return cc


@transaction.atomic
def team_cost_center_set(*, team, cost_center: CostCenter) -> TeamCostCenter:
    """Put a team in a cost center (a team belongs to exactly one; later hours bill there)."""
    link, _ = TeamCostCenter.objects.update_or_create(
        team=team, defaults={"cost_center": cost_center}
    )
    return link
