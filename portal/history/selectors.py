"""Reads of the change history: the rows a user may see, and each change as people read it.

Who sees what (the portal's rules, `portal.pages.access`): platform admins everything;
others the queues they see (their teams' queues, the subtrees below and the ancestors inside
the department, so a lead sees the subtree they decide for) with those queues' quotas, the
budgets of their teams' cost centers (as on the costs page), and flavors, clusters, nodes and
rate cards, which every signed-in user reads anyway; policies are for admins only. A deleted
queue's history stays readable by admins only.

What changed is computed when read: each row is compared with the object's previous row
(simple-history's `diff_against`), so nothing but the state is stored per change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.urls import NoReverseMatch, reverse

from core.history import BASELINE_REASON, Source
from portal.history.kinds import BY_KEY, KINDS, Kind, raw, text
from portal.pages.access import Scope, user_scope

ACTIONS = {"+": "created", "~": "changed", "-": "deleted"}
SOURCE_LABELS = dict(Source.choices)
# (kind, history id, date): what `HistoryFilter.qs` yields, newest first.
Row = tuple[str, int, datetime]


@dataclass(frozen=True)
class FieldChange:
    """One field of a change: before and after, as stored and in words."""

    field: str
    label: str
    before: Any
    after: Any
    before_text: str
    after_text: str


@dataclass(frozen=True)
class HistoryEntry:
    """One recorded change of one object: who, when, by which path, what."""

    kind: str
    kind_label: str
    object: str  # "queue:12"
    object_label: str
    url: str | None
    history_id: int
    at: datetime
    user: str | None
    source: str
    source_label: str
    action: str
    reason: str
    changes: tuple[FieldChange, ...]
    # False for a change whose object has no earlier row (before unknown).
    before_known: bool


def history_querysets(*, user: User | AnonymousUser, kinds: Iterable[str] | None = None,
                      scope: Scope | None = None) -> dict[str, QuerySet]:
    """Per kind (all, or those named), the historical rows `user` may read (`scope`: the
    user's, when the caller has it already)."""
    scope = scope or user_scope(user)
    wanted = set(kinds) if kinds is not None else None
    out: dict[str, QuerySet] = {}
    for kind in KINDS:
        if wanted is not None and kind.key not in wanted:
            continue
        qs = kind.history_model.objects.exclude(history_change_reason=BASELINE_REASON)
        if not scope.is_admin:
            qs = _visible(kind, qs, user, scope.visible_queue_ids)
        out[kind.key] = qs
    return out


def _visible(kind: Kind, qs: QuerySet, user: Any, queue_ids: frozenset[int]) -> QuerySet:
    if kind.key == "queue":
        return qs.filter(id__in=queue_ids)
    if kind.key == "quota":
        return qs.filter(queue_id__in=queue_ids)
    if kind.key in ("budget", "threshold"):
        from billing.selectors import visible_budgets

        budgets = visible_budgets(user).order_by().values("pk")
        return qs.filter(**{"id__in" if kind.key == "budget" else "budget_id__in": budgets})
    if kind.key == "policy":
        return qs.none()
    return qs


def _value(kind: Kind, row: Any, field: str) -> Any:
    return getattr(row, kind.field(field).attname)


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == {} or value == []


class _Names:
    """Names of the objects rows refer to by id, read once per page (one query per model)."""

    def __init__(self, records: Sequence[tuple[Kind, Any]]) -> None:
        ids: dict[str, set[Any]] = defaultdict(set)
        for kind, row in records:
            for f in kind.fields:
                field = kind.field(f)
                if field.is_relation:
                    ids[field.related_model._meta.label].add(_value(kind, row, f))
            if kind.owner is not None:
                owner = BY_KEY[kind.owner[0]].model._meta.label
                ids[owner].add(getattr(row, kind.owner[1]))
            if kind.key in ("queue", "cluster", "policy"):
                ids[kind.model._meta.label].add(row.id)
        self.names: dict[tuple[str, Any], str] = {}
        self.live: set[tuple[str, Any]] = set()
        for label, pks in ids.items():
            pks.discard(None)
            if pks:
                self._read(label, pks)

    def _read(self, label: str, pks: set[Any]) -> None:
        from django.apps import apps

        model = apps.get_model(label)
        if label == "billing.Budget":
            rows = model.objects.filter(pk__in=pks).values_list("pk", "cost_center__code", "period")
            found = {pk: f"{code} {period}" for pk, code, period in rows}
        else:
            attr = {"quotas.Queue": "path", "billing.CostCenter": "code"}.get(label, "name")
            found = dict(model.objects.filter(pk__in=pks).values_list("pk", attr))
        self.live.update((label, pk) for pk in found)
        missing = pks - set(found)
        if missing and label == "quotas.Queue":
            # A deleted queue is named by its last recorded path.
            history = model.history.model
            for pk, path in (history.objects.filter(id__in=missing)
                             .order_by("id", "-history_id").values_list("id", "path")):
                found.setdefault(pk, path)
        for pk, name in found.items():
            self.names[(label, pk)] = str(name)

    def name(self, label: str, pk: Any) -> str:
        return self.names.get((label, pk), f"#{pk}")


def _label(kind: Kind, row: Any, names: _Names) -> str:
    flavor = names.name("quotas.Flavor", getattr(row, "flavor_id", None))
    if kind.key == "quota":
        return f"{names.name('quotas.Queue', row.queue_id)} {flavor}/{row.resource}"
    if kind.key == "node":
        return f"{names.name('scheduling.Cluster', row.cluster_id)}/{row.name}"
    if kind.key == "ratecard":
        return f"{flavor} {row.resource} v{row.version}"
    if kind.key == "budget":
        return f"{names.name('billing.CostCenter', row.cost_center_id)} {row.period}"
    if kind.key == "threshold":
        return f"{names.name('billing.Budget', row.budget_id)} {row.percent}% {row.action}"
    return str(row.path if kind.key == "queue" else row.name)


def _url(kind: Kind, row: Any, names: _Names) -> str | None:
    try:
        if kind.key in ("queue", "quota"):
            pk = row.id if kind.key == "queue" else row.queue_id
            if ("quotas.Queue", pk) in names.live:
                return reverse("queue-detail", args=[names.name("quotas.Queue", pk)])
        elif kind.key in ("cluster", "node"):
            pk = row.id if kind.key == "cluster" else row.cluster_id
            if ("scheduling.Cluster", pk) in names.live:
                return reverse("cluster-detail", args=[names.name("scheduling.Cluster", pk)])
        elif kind.key == "policy":
            if ("policies.Policy", row.id) in names.live:
                return reverse("policy-edit", args=[row.name])
        elif kind.key == "ratecard":
            return reverse("billing-rates")
        elif kind.key in ("budget", "threshold"):
            return reverse("billing-overview")
    except NoReverseMatch:
        pass
    return None


def _change(kind: Kind, field: str, names: _Names, before_row: Any, after_row: Any,
            before: Any = None, after: Any = None) -> FieldChange:
    """One field's change; a missing row (None) is a side with nothing (created, deleted)."""
    related = kind.field(field)

    def words(value: Any, row: Any) -> str:
        if row is None:
            return "–"
        if related.is_relation and value is not None:
            return names.name(related.related_model._meta.label, value)
        return text(kind, field, value, row)

    return FieldChange(
        field=field, label=kind.field_labels[field], before=raw(before), after=raw(after),
        before_text=words(before, before_row), after_text=words(after, after_row),
    )


def _changes(kind: Kind, row: Any, previous: Any, names: _Names) -> tuple[FieldChange, ...]:
    listed = [f for f in kind.fields if f not in kind.identity]
    if row.history_type == "+" or (row.history_type == "~" and previous is None):
        # Created, or changed with no earlier row (before unknown): what it holds now.
        return tuple(_change(kind, f, names, None, row, after=_value(kind, row, f))
                     for f in listed if not _empty(_value(kind, row, f)))
    if row.history_type == "-":
        return tuple(_change(kind, f, names, row, None, before=_value(kind, row, f))
                     for f in listed if not _empty(_value(kind, row, f)))
    editable = [f for f in kind.fields if kind.field(f).editable]
    delta = row.diff_against(previous, included_fields=editable)
    changed = {c.field: (c.old, c.new) for c in delta.changes}
    # diff_against leaves out fields people cannot edit directly (a queue's path follows
    # its parent and name; a policy's version is counted): compared here.
    for f in kind.fields:
        if f not in editable and _value(kind, row, f) != _value(kind, previous, f):
            changed[f] = (_value(kind, previous, f), _value(kind, row, f))
    return tuple(_change(kind, f, names, previous, row, *changed[f])
                 for f in kind.fields if f in changed)


def history_entries(rows: Sequence[Row]) -> list[HistoryEntry]:
    """The rows of one page as entries, in the same order.

    One query per kind for the rows and the row before each (the object's previous state),
    then one per related model for names.
    """
    by_kind: dict[str, list[int]] = defaultdict(list)
    for key, history_id, _ in rows:
        by_kind[key].append(history_id)
    fetched: dict[tuple[str, int], tuple[Any, Any]] = {}
    for key, ids in by_kind.items():
        kind = BY_KEY[key]
        model = kind.history_model
        earlier = (model.objects.filter(id=OuterRef("id"), history_id__lt=OuterRef("history_id"))
                   .order_by("-history_id").values("history_id")[:1])
        before = model.objects.filter(history_id__in=ids).annotate(p=Subquery(earlier))
        both = {r.history_id: r for r in model.objects.filter(
            Q(history_id__in=ids) | Q(history_id__in=before.values("p"))
        ).select_related("history_user").annotate(previous_id=Subquery(earlier))}
        for history_id in ids:
            r = both.get(history_id)
            if r is not None:
                fetched[(key, history_id)] = (r, both.get(r.previous_id))
    names = _Names([(BY_KEY[k], r) for (k, _), (r, _) in fetched.items()]
                   + [(BY_KEY[k], p) for (k, _), (_, p) in fetched.items() if p is not None])
    out = []
    for key, history_id, _ in rows:
        found = fetched.get((key, history_id))
        if found is None:
            continue
        row, previous = found
        kind = BY_KEY[key]
        out.append(HistoryEntry(
            kind=key, kind_label=kind.label, object=f"{key}:{row.id}",
            object_label=_label(kind, row, names), url=_url(kind, row, names),
            history_id=history_id, at=row.history_date,
            user=row.history_user.get_username() if row.history_user else None,
            source=row.history_source,
            source_label=SOURCE_LABELS.get(row.history_source, row.history_source),
            action=ACTIONS.get(row.history_type, row.history_type),
            reason=row.history_change_reason or "",
            changes=_changes(kind, row, previous, names),
            before_known=previous is not None or row.history_type != "~",
        ))
    return out
