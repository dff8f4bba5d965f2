"""Who may see which costs: admins everything, everyone else their teams' (invoices: leads)."""

from __future__ import annotations

from django.db.models import QuerySet

from billing.models import Budget, Invoice, TeamCostCenter
from quotas.models import TeamMembership, TeamRole


def is_admin(user) -> bool:
    """Platform admins (staff or superusers) see every cost."""
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def visible_team_ids(user) -> set[int] | None:
    """The teams whose costs the user may see; None means all (admins)."""
    if is_admin(user):
        return None
    return set(TeamMembership.objects.filter(user=user).values_list("team_id", flat=True))


def narrow(qs: QuerySet, team_ids: set[int] | None) -> QuerySet:
    return qs if team_ids is None else qs.filter(team_id__in=team_ids)


def visible_budgets(user) -> QuerySet:
    """Budgets of the cost centers of the user's teams (admins: all)."""
    qs = Budget.objects.select_related("cost_center").prefetch_related("thresholds")
    team_ids = visible_team_ids(user)
    if team_ids is None:
        return qs
    ccs = TeamCostCenter.objects.filter(team_id__in=team_ids).values("cost_center_id")
    return qs.filter(cost_center_id__in=ccs)


def visible_invoices(user) -> QuerySet:
    """Invoices: admins all; leads those of their teams' cost centers; researchers none."""
    qs = Invoice.objects.select_related("cost_center")
    if is_admin(user):
        return qs
    lead_teams = TeamMembership.objects.filter(user=user, role=TeamRole.LEAD).values("team_id")
    ccs = TeamCostCenter.objects.filter(team_id__in=lead_teams).values("cost_center_id")
    return qs.filter(cost_center_id__in=ccs)


def visible_workload(user, workload_id: int):
    """The workload if the user may see its costs (admins, its owner, its team's members)."""
    from scheduling.models import Workload

    workload = Workload.objects.select_related("queue", "team", "owner").filter(
        pk=workload_id).first()
    if workload is None:
        return None
    team_ids = visible_team_ids(user)
    if team_ids is None or workload.owner_id == user.pk or workload.team_id in team_ids:
        return workload
    return None
