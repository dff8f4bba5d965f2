"""`cost_center`: billing's cost center of a team as rules read it, else empty values.

Billing is optional here: it is read through its selectors when it is installed, and its
failure never blocks a submission.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.utils import timezone

from quotas.models import Team

logger = logging.getLogger(__name__)


EMPTY_COST_CENTER: dict[str, Any] = {
    "name": "", "currency": "", "budget": 0.0, "spent": 0.0, "forecast": 0.0,
    "remaining": 0.0, "over_budget": False,
}


UNREAD = object()


def cost_center_variables(
    team: Team | None, *, now: datetime | None = None, cost_center: Any = UNREAD,
) -> dict[str, Any]:
    """`cost_center` from billing when billing is there, else empty values.

    Uses `billing.selectors.cost_center_summary(team=...)` if billing provides it; otherwise
    billing's cost center of the team (`cost_center_of`), its active budget (monthly first)
    with `budget_forecast` (spent this period and the forecast at its end), or, without a
    budget, the cost center's ledger this month (`spent_in`). Money becomes float for CEL.
    `cost_center`: the team's cost center (or None) already read (`submission_rows`).
    """
    if team is None:
        return dict(EMPTY_COST_CENTER)
    try:
        from billing import selectors as billing_selectors  # noqa: PLC0415
    except ImportError:
        return dict(EMPTY_COST_CENTER)
    try:
        summary = _billing_summary(billing_selectors, team, now or timezone.now(), cost_center)
    except Exception:  # billing is optional here: its failure must not block every submission
        logger.exception("cost center of team %s could not be read from billing", team)
        return dict(EMPTY_COST_CENTER)
    if not summary:
        return dict(EMPTY_COST_CENTER)
    out: dict[str, Any] = dict(EMPTY_COST_CENTER)
    for field in ("name", "currency"):
        out[field] = str(summary.get(field, "") or "")
    for field in ("budget", "spent", "forecast"):
        out[field] = float(summary.get(field) or 0)
    out["remaining"] = out["budget"] - out["spent"]
    out["over_budget"] = bool(out["budget"]) and out["spent"] >= out["budget"]
    return out


def _billing_summary(
    billing_selectors: Any, team: Team, now: datetime, cost_center: Any = UNREAD,
) -> dict[str, Any] | None:
    summary_fn = getattr(billing_selectors, "cost_center_summary", None)
    if summary_fn is not None:
        return summary_fn(team=team)
    cost_center_of = getattr(billing_selectors, "cost_center_of", None)
    if cost_center_of is None:
        return None
    cc = cost_center_of(team) if cost_center is UNREAD else cost_center
    if cc is None:
        return None
    out: dict[str, Any] = {"name": cc.code, "currency": cc.currency}
    budget = cc.budgets.filter(active=True).order_by("period").first() if hasattr(
        cc, "budgets") else None
    forecast_fn = getattr(billing_selectors, "budget_forecast", None)
    if budget is not None and forecast_fn is not None:
        f = forecast_fn(budget, now)
        out.update(budget=budget.amount, spent=f["spent"], forecast=f["forecast"])
        return out
    from billing.services import budgets as billing_budgets  # noqa: PLC0415

    start, end = billing_budgets.period_bounds("monthly", now)
    spent = billing_budgets.spent_in(cc.pk, start, end)
    out.update(budget=0, spent=spent, forecast=spent)
    return out
