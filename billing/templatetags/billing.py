"""Cost on other apps' pages: `{% load billing %}` then `{% workload_cost_card w %}` on a
workload's page and `{% team_month_to_date_card team %}` on the dashboard."""

from django import template

from billing import selectors

register = template.Library()


@register.inclusion_tag("billing/partials/workload_cost.html")
def workload_cost_card(workload):
    """The workload's cost so far, its estimated total, reserved/frozen/active and efficiency."""
    return {"cost": selectors.workload_cost(workload), "workload": workload}


@register.inclusion_tag("billing/partials/team_month_to_date.html")
def team_month_to_date_card(team):
    """A team's spend this month and its budget standing."""
    return {"mtd": selectors.team_month_to_date(team)}


@register.inclusion_tag("billing/partials/workload_utilisation.html")
def workload_utilisation_card(workload):
    """The workload's GPU utilisation from telemetry: over its run and hour by hour."""
    return {"util": selectors.workload_utilisation(workload.pk), "workload": workload}
