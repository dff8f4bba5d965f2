"""Which cost center pays for a team, and the currency shown when nothing else names one."""

from __future__ import annotations

from billing.models import CostCenter, TeamCostCenter


def default_currency() -> str:
    cc = CostCenter.objects.order_by("-is_default", "code").first()
    return cc.currency if cc else "EUR"


def cost_center_of(team) -> CostCenter | None:
    link = TeamCostCenter.objects.select_related("cost_center").filter(team=team).first()
    if link is not None:
        return link.cost_center
    return CostCenter.objects.filter(is_default=True).first()
