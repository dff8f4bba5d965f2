"""Demo billing for `make run` (called by seed_demo): cost centers, rate cards, budgets.

Idempotent: existing objects are left as they are. Without a Prometheus configured
(ALLOT_PROMETHEUS_URL) the demo bills on allocation and records every minute as a gap.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from billing.models import Budget, CostCenter, RateCard
from billing.services import budget_create, rate_card_create, team_cost_center_set

SINCE = datetime(2020, 1, 1, tzinfo=UTC)
# flavor: [(resource, rate, frozen rate or None)], EUR per GPU-hour / core-hour / GiB-hour
RATES: dict[str, list[tuple[str, str, str | None]]] = {
    "a100-80g": [("gpu", "2.40", "1.20")],
    "h100-80g": [("gpu", "4.10", "2.05")],
    "v100-32g": [("gpu", "0.90", None)],
    "cpu": [("cpu", "0.04", None), ("memory", "0.005", None)],
}
# code: (name, basis, teams, monthly budget, thresholds)
COST_CENTERS: dict[str, tuple[str, str, list[str], str, list[tuple[int, str]]]] = {
    "research": ("Research", "allocation", ["vision", "nlp", "robotics"], "20000",
                 [(50, "notify"), (80, "notify"), (100, "block")]),
    "product": ("Product", "hybrid", ["search", "recsys"], "15000",
                [(50, "notify"), (90, "lower"), (100, "block")]),
}


def seed() -> list[str]:
    """Create the demo's cost centers, rates and budgets when missing."""
    from quotas.models import Flavor, Team

    for fname, rates in RATES.items():
        flavor = Flavor.objects.filter(name=fname).first()
        if flavor is None:
            continue
        for resource, rate, frozen in rates:
            if not RateCard.objects.filter(flavor=flavor, resource=resource).exists():
                rate_card_create(
                    flavor=flavor, resource=resource, rate=Decimal(rate),
                    frozen_rate=Decimal(frozen) if frozen else None, effective_from=SINCE,
                    note="demo rate",
                )
    for code, (name, basis, teams, amount, thresholds) in COST_CENTERS.items():
        cc, _ = CostCenter.objects.get_or_create(
            code=code, defaults={"name": name, "charge_basis": basis},
        )
        for team in Team.objects.filter(name__in=teams):
            if not hasattr(team, "cost_center_link"):
                team_cost_center_set(team=team, cost_center=cc)
        if not Budget.objects.filter(cost_center=cc).exists():
            budget_create(cost_center=cc, amount=Decimal(amount), thresholds=thresholds)
    return [
        f"  billing: {len(COST_CENTERS)} cost centers (research: allocation, product: hybrid), "
        f"rates for {len(RATES)} flavors, monthly budgets with notify/lower/block thresholds"
    ]
