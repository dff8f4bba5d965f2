"""Rate cards and cost centers."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from billing.metering import HOUR
from billing.models import (
    UNITS,
    BillableResource,
    ChargeBasis,
    CostCenter,
    LedgerEntry,
    RateCard,
    TeamCostCenter,
)


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

    Refused when it would reach back into hours already in the ledger (a change never
    rewrites past charges) or before the current version's start.
    """
    if resource not in BillableResource.values:
        raise ValidationError({"resource": [f"unknown resource {resource!r}"]})
    rate = Decimal(rate)
    if rate < 0 or (frozen_rate is not None and Decimal(frozen_rate) < 0):
        raise ValidationError({"rate": [f"rates cannot be negative (got {rate}, {frozen_rate})"]})
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
        unit=UNITS[BillableResource(resource)], currency=currency.upper(), note=note,
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
