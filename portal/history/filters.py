"""One FilterSet for the change history, used by the history page and `GET /api/v1/history`.

The history lives in one table per tracked model; the filters apply to each of them (their
history columns are named alike) and `qs` is the union, newest first, as (kind, history id,
date) rows for `selectors.history_entries`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import django_filters
from django import forms
from django.db.models import CharField, QuerySet, Value
from django.utils.dateparse import parse_date, parse_datetime

from core.history import Source
from portal.history.kinds import BY_KEY, KIND_CHOICES, kind_of

OBJECT_HELP = ("type:id, e.g. queue:12 (a queue with its quotas), cluster:3 (with its nodes), "
               "budget:2 (with its thresholds), policy:5")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
MOMENT_HELP = "A date (2026-12-01) or an ISO 8601 moment (2026-12-01T10:00:00Z); UTC if no zone."


class ObjectRefField(forms.Field):
    """`type:id` -> (type, id)."""

    def to_python(self, value: Any) -> tuple[str, int] | None:
        value = str(value or "").strip()
        if not value:
            return None
        kind, sep, pk = value.partition(":")
        if not sep or not (pk.isascii() and pk.isdigit()):
            raise forms.ValidationError(
                f"{value!r} is not type:id (e.g. queue:12)", code="invalid")
        if kind not in BY_KEY:
            raise forms.ValidationError(
                f"unknown type {kind!r}: one of {', '.join(BY_KEY)}", code="invalid")
        return kind, int(pk)


class MomentField(forms.Field):
    """A date or a moment; a date `until` means the end of that day."""

    def __init__(self, *, end_of_day: bool = False, **kwargs: Any) -> None:
        self.end_of_day = end_of_day
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> datetime | None:
        value = str(value or "").strip()
        if not value:
            return None
        message = f"{value!r} is not a date (2026-12-01) or an ISO 8601 moment"
        try:
            # parse_datetime reads a bare date as its midnight: dates are told apart first.
            day = parse_date(value) if DATE.fullmatch(value) else None
            moment = parse_datetime(value) if day is None else None
        except ValueError as exc:
            raise forms.ValidationError(message, code="invalid") from exc
        if moment is None:
            if day is None:
                raise forms.ValidationError(message, code="invalid")
            moment = datetime.combine(day, time(), tzinfo=UTC)
            if self.end_of_day:
                if day == date.max:
                    raise forms.ValidationError(f"{value} is out of range: the last day is "
                                                f"{date.max - timedelta(days=1)}", code="invalid")
                moment += timedelta(days=1)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment


class ObjectRefFilter(django_filters.Filter):
    field_class = ObjectRefField


class MomentFilter(django_filters.Filter):
    field_class = MomentField


class HistoryFilterForm(forms.Form):
    """Checks the range as a whole: `until` must not come before `since`."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since is not None and until is not None and until <= since:
            self.add_error("until", "until must be later than since")
        return data


_DAY = {"placeholder": "YYYY-MM-DD"}


class HistoryFilter(django_filters.FilterSet):
    """Filter changes by object type, object, user, path (source) and date range."""

    type = django_filters.MultipleChoiceFilter(
        choices=KIND_CHOICES, method="filter_type", label="Object type",
        help_text="Repeat for several: type=queue&type=quota.")
    object = ObjectRefFilter(method="filter_object", label="Object", help_text=OBJECT_HELP,
                             widget=forms.TextInput(attrs={"placeholder": "queue:12"}))
    user = django_filters.CharFilter(field_name="history_user__username", label="User",
                                     help_text="Username of who made the change.",
                                     widget=forms.TextInput(attrs={"placeholder": "username"}))
    source = django_filters.ChoiceFilter(
        field_name="history_source", choices=Source.choices, label="Path",
        help_text="Where the change came from.", empty_label="any")
    since = MomentFilter(field_name="history_date", lookup_expr="gte", label="Since",
                         help_text=MOMENT_HELP, widget=forms.TextInput(attrs=_DAY))
    until = MomentFilter(field_name="history_date", lookup_expr="lt", end_of_day=True,
                         label="Until", help_text=MOMENT_HELP + " A date includes that day.",
                         widget=forms.TextInput(attrs=_DAY))

    class Meta:
        form = HistoryFilterForm
        fields = ["type", "object", "user", "source", "since", "until"]

    def __init__(self, data: Any = None, *, parts: Mapping[str, QuerySet],
                 request: Any = None) -> None:
        # The FilterSet is declared once for every historical model: `parts` are the
        # visible rows per kind (selectors.history_querysets), filtered one by one.
        self.parts = dict(parts)
        first = next(iter(self.parts.values()))
        super().__init__(data, queryset=first, request=request)

    def filter_type(self, queryset: QuerySet, name: str, value: list[str]) -> QuerySet:
        if value and kind_of(queryset.model).key not in value:
            return queryset.none()
        return queryset

    def filter_object(self, queryset: QuerySet, name: str,
                      value: tuple[str, int] | None) -> QuerySet:
        if value is None:
            return queryset
        ref_kind, pk = value
        kind = kind_of(queryset.model)
        if kind.key == ref_kind:
            return queryset.filter(id=pk)
        if kind.owner is not None and kind.owner[0] == ref_kind:
            return queryset.filter(**{kind.owner[1]: pk})
        return queryset.none()

    @property
    def qs(self) -> Any:
        """(kind, history id, date) rows of every kind, newest first (a list when empty)."""
        if not hasattr(self, "_qs"):
            if self.is_bound:
                self.errors  # noqa: B018 - validates the form before filtering
            rows = []
            for key, part in self.parts.items():
                if self.is_bound:
                    part = self.filter_queryset(part)
                if part.query.is_empty():
                    continue
                rows.append(part.order_by()
                            .annotate(history_kind=Value(key, output_field=CharField()))
                            .values_list("history_kind", "history_id", "history_date"))
            if not rows:
                self._qs: Any = []
            else:
                union = rows[0].union(*rows[1:], all=True) if len(rows) > 1 else rows[0]
                self._qs = union.order_by("-history_date", "-history_id")
        return self._qs
