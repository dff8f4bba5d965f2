"""One FilterSet for the violations list, used by the page and the API."""

import re

import django_filters

from .models import PolicyMode, PolicyViolation, ViolationOutcome


class PolicyViolationFilter(django_filters.FilterSet):
    """Filter violations by policy name, outcome, mode, queue subtree and time."""

    policy = django_filters.CharFilter(field_name="policy__name")
    outcome = django_filters.ChoiceFilter(choices=ViolationOutcome.choices)
    mode = django_filters.ChoiceFilter(choices=PolicyMode.choices)
    queue = django_filters.CharFilter(method="filter_queue", label="Queue subtree")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")

    class Meta:
        model = PolicyViolation
        fields = ["policy", "outcome", "mode", "queue", "since"]

    def filter_queue(self, queryset, name, value):  # type: ignore[no-untyped-def]
        return queryset.filter(queue_path__regex=rf"^{re.escape(value)}(/|$)")

