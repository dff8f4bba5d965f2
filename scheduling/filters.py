"""One FilterSet for the workload list, shared by the API and the HTML page."""

from __future__ import annotations

import django_filters

from scheduling.models import Workload, WorkloadState


class WorkloadFilter(django_filters.FilterSet):
    """Filter workloads by state (repeat `state` for several), queue path and name."""

    state = django_filters.MultipleChoiceFilter(choices=WorkloadState.choices)
    queue = django_filters.CharFilter(method="filter_queue", label="Queue path (and below)")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    priority_class = django_filters.CharFilter(field_name="priority_class__name")

    class Meta:
        model = Workload
        fields = ["state", "queue", "name", "priority_class"]

    def filter_queue(self, queryset, name, value):  # type: ignore[no-untyped-def]
        """A queue path matches its own workloads and those of the queues below it."""
        value = value.strip("/")
        return queryset.filter(queue__path=value) | queryset.filter(
            queue__path__startswith=f"{value}/"
        )
