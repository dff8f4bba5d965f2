"""One FilterSet for the violations list, used by the page and the API."""

import re
from datetime import UTC, datetime

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField

from .models import PolicyMode, PolicyViolation, ViolationOutcome


class UtcIsoDateTimeField(IsoDateTimeField):  # type: ignore[misc]
    """An ISO 8601 time, read in UTC. Python takes any offset under 24 hours, PostgreSQL none
    beyond 15:59 ("time zone displacement out of range", a 500 before): the time is compared
    in UTC, and one that leaves the calendar when moved there is a 400."""

    def to_python(self, value: object) -> datetime | None:
        moment: datetime | None = super().to_python(value)
        if moment is None or moment.tzinfo is None:
            return moment
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(f"{value} is out of range in UTC") from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):  # type: ignore[misc]
    field_class = UtcIsoDateTimeField


class PolicyViolationFilter(django_filters.FilterSet):
    """Filter violations by policy name, outcome, mode, queue subtree and time."""

    policy = django_filters.CharFilter(field_name="policy__name")
    outcome = django_filters.ChoiceFilter(choices=ViolationOutcome.choices)
    mode = django_filters.ChoiceFilter(choices=PolicyMode.choices)
    queue = django_filters.CharFilter(method="filter_queue", label="Queue subtree")
    since = UtcIsoDateTimeFilter(field_name="at", lookup_expr="gte")

    class Meta:
        model = PolicyViolation
        fields = ["policy", "outcome", "mode", "queue", "since"]

    def filter_queue(self, queryset, name, value):  # type: ignore[no-untyped-def]
        return queryset.filter(queue_path__regex=rf"^{re.escape(value)}(/|$)")

