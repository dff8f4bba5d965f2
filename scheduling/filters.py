"""One FilterSet for the workload list, shared by the API and the HTML page."""

from __future__ import annotations

import django_filters

from scheduling.models import Workload, WorkloadState


class WorkloadFilter(django_filters.FilterSet):
    """Filter workloads by state (repeat `state` for several), queue path, name, priority
    class, and `mine=true` (the caller's own)."""

    state = django_filters.MultipleChoiceFilter(choices=WorkloadState.choices)
    queue = django_filters.CharFilter(method="filter_queue", label="Queue path (and below)")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    priority_class = django_filters.CharFilter(field_name="priority_class__name")
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only mine")

    class Meta:
        model = Workload
        fields = ["state", "queue", "name", "priority_class", "mine"]

    def filter_queue(self, queryset, name, value):  # type: ignore[no-untyped-def]
        """A queue path matches its own workloads and those of the queues below it."""
        value = value.strip("/")
        return queryset.filter(queue__path=value) | queryset.filter(
            queue__path__startswith=f"{value}/"
        )

    def filter_mine(self, queryset, name, value):  # type: ignore[no-untyped-def]
        """`mine=true`: the signed-in user's own workloads (a lead's list holds the team's)."""
        user = getattr(self.request, "user", None)
        if not value or user is None:
            return queryset
        return queryset.filter(owner=user)
