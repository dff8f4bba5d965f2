"""One FilterSet for the capacity request list page and the API list."""

import django_filters

from quotas.capacity.models import CapacityRequest, CapacityRequestState


class CapacityRequestFilter(django_filters.FilterSet):
    """Filter by state, queue path (subtree), flavor name; sort by creation or start."""

    state = django_filters.ChoiceFilter(choices=CapacityRequestState.choices)
    queue = django_filters.CharFilter(method="filter_queue", label="Queue (path, subtree)")
    flavor = django_filters.CharFilter(field_name="flavor__name", label="GPU model")
    ordering = django_filters.OrderingFilter(
        fields=(("created_at", "created"), ("starts_at", "starts"), ("state", "state")),
    )

    class Meta:
        model = CapacityRequest
        fields = ["state", "queue", "flavor"]

    def filter_queue(self, queryset, name, value):  # type: ignore[no-untyped-def]
        value = value.strip("/")
        return queryset.filter(queue__path=value) | queryset.filter(
            queue__path__startswith=value + "/"
        )
