"""Change history: who changed a tracked object, when, and by which path.

The tracked models (the quota tree, flavors, clusters and nodes, policies, rate cards and
budgets) declare `history = SourcedHistoricalRecords()` (django-simple-history). Every save or
delete of one writes a row to its historical table with the user (simple-history's
`HistoryRequestMiddleware` exposes the request; DRF puts a token's user on it too) and the
path it came by, `history_source`, read from a context variable that each entry point sets:

- `HistorySourceMiddleware`: `admin` under /admin/, `api` under /api/, `page` elsewhere;
- `with history_context(Source.IMPORT)` (or as a decorator) around an import, a capacity
  request's change, a cluster sync; anything else (Celery beat, the demo seed, a shell) is
  `system`. The innermost context wins: a capacity request approved from a page is
  `capacity_request`; the tree editor's save is `page` (it calls the tree service directly,
  not the importer).

Writes that bypass `save()` (`QuerySet.update`, `bulk_update`, `bulk_create`) write no row;
docs/portal.md ("Change history") says which ones the project makes and why.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from simple_history.models import HistoricalRecords
from simple_history.signals import post_create_historical_record, pre_create_historical_record

# The change reason of the rows the migrations write for objects that existed before their
# history did: the state the first recorded change is compared with. Listings skip them.
BASELINE_REASON = "history started"


class Source(models.TextChoices):
    ADMIN = "admin", "admin"
    API = "api", "API"
    PAGE = "page", "portal page"
    IMPORT = "import", "import"
    CAPACITY_REQUEST = "capacity_request", "capacity request"
    SYNC = "sync", "cluster sync"
    SYSTEM = "system", "system"


@dataclass(frozen=True)
class HistoryContext:
    """Where the writes of the current call come from; `user` and `reason`, when set, are
    recorded instead of the request's user and an empty change reason."""

    source: str
    user: Any = None
    reason: str = ""


_SYSTEM = HistoryContext(source=Source.SYSTEM)
_current: contextvars.ContextVar[HistoryContext] = contextvars.ContextVar(
    "allot_history_context", default=_SYSTEM)
# Inside `history_batch()`: the historical rows waiting to be written in bulk.
_batch: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "allot_history_batch", default=None)


@contextmanager
def history_context(source: str, *, user: Any = None, reason: str = "") -> Iterator[None]:
    """Record the writes made inside as coming from `source` (and `user`, `reason` if given).

    Usable as a decorator too. The previous context is restored on the way out."""
    token = _current.set(HistoryContext(source=source, user=user, reason=reason))
    try:
        yield
    finally:
        _current.reset(token)


@contextmanager
def history_batch() -> Iterator[None]:
    """Write the historical rows of the changes made inside in one INSERT per table, at the
    end (an import of hundreds of queues pays a round trip per table, not one per row).

    Use it inside the transaction that makes the changes: the rows are written in it. A
    body that raises writes none. `post_create_historical_record` is not sent for them.
    """
    if _batch.get() is not None:  # already batching: the outer batch writes them
        yield
        return
    pending: list[Any] = []
    token = _batch.set(pending)
    try:
        yield
    finally:
        _batch.reset(token)
    by_model: dict[Any, list[Any]] = {}
    for row in pending:
        by_model.setdefault(type(row), []).append(row)
    for model, rows in by_model.items():
        model.objects.bulk_create(rows, batch_size=1000)


class SourcedHistory(models.Model):
    """Abstract base of every historical model: the path a change came by."""

    history_source = models.CharField(
        max_length=16, choices=Source.choices, default=Source.SYSTEM,
        help_text="admin, api, page, import, capacity_request, sync or system.",
    )

    class Meta:
        abstract = True


class SourcedHistoricalRecords(HistoricalRecords):
    """simple-history's HistoricalRecords with `history_source` on every row.

    A save limited (`update_fields`) to fields the history leaves out writes no row: the
    cluster's dispatch penalty, for one, is engine state, not an edit.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("bases", [SourcedHistory])
        super().__init__(**kwargs)

    def post_save(self, instance: Any, created: bool, using: Any = None, **kwargs: Any) -> None:
        fields = kwargs.get("update_fields")
        if not created and fields and set(fields) <= set(self.excluded_fields):
            return
        super().post_save(instance, created, using=using, **kwargs)

    def create_history_model(self, model: Any, inherited: bool) -> Any:
        history_model = super().create_history_model(model, inherited)
        self.history_model = history_model
        return history_model

    def create_historical_record(self, instance: Any, history_type: str,
                                 using: Any = None) -> None:
        """simple-history's (3.13) way of writing a row, with two changes: the historical
        model is not reached through the `history` descriptor (it builds a manager class on
        every access, most of a row's cost), and inside history_batch() the row waits."""
        model = self.history_model
        if model._history_m2m_fields or hasattr(model, "history_relation"):
            super().create_historical_record(instance, history_type, using=using)
            return
        using = using if self.use_base_model_db else None
        history_date = getattr(instance, "_history_date", timezone.now())
        history_user = self.get_history_user(instance)
        reason = self.get_change_reason_for_object(instance, history_type, using)
        row = model(
            history_date=history_date, history_type=history_type, history_user=history_user,
            history_change_reason=reason,
            **{f.attname: getattr(instance, f.attname) for f in self.fields_included(instance)},
        )
        signal = {"sender": model, "instance": instance, "history_instance": row,
                  "history_date": history_date, "history_user": history_user,
                  "history_change_reason": reason, "using": using}
        pre_create_historical_record.send(**signal)
        pending = _batch.get()
        if pending is not None:
            pending.append(row)
            return
        row.save(using=using)
        post_create_historical_record.send(**signal)


@receiver(pre_create_historical_record)
def _fill_source(sender: Any, history_instance: Any, **kwargs: Any) -> None:
    """Stamp each new historical row with the current context."""
    if not isinstance(history_instance, SourcedHistory):
        return
    row: Any = history_instance
    context = _current.get()
    row.history_source = context.source
    if context.user is not None and getattr(context.user, "pk", None) is not None:
        row.history_user = context.user
    if context.reason and not row.history_change_reason:
        row.history_change_reason = context.reason[:100]


ADMIN_PREFIX = "/admin/"
API_PREFIX = "/api/"


_REQUEST_CONTEXTS: dict[str, HistoryContext] = {
    s: HistoryContext(source=s) for s in (Source.ADMIN, Source.API, Source.PAGE)}


def source_for_path(path: str) -> str:
    """The history source of a request by its path: admin, api or page."""
    if path.startswith(ADMIN_PREFIX):
        return Source.ADMIN
    if path.startswith(API_PREFIX):
        return Source.API
    return Source.PAGE


class HistorySourceMiddleware:
    """Records a request's writes as `admin`, `api` or `page` (by its path)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _current.set(_REQUEST_CONTEXTS[source_for_path(request.path_info)])
        try:
            return self.get_response(request)
        finally:
            _current.reset(token)


def baseline_rows(apps: Any, schema_editor: Any, *, app_label: str, model_names: tuple[str, ...],
                  batch_size: int = 1000) -> None:
    """Migrations: one `~` row per existing object (reason BASELINE_REASON, source system),
    so that the first change recorded after history starts has a state to be compared with.

    Called by the migrations that add history; keep its signature.
    """
    now = timezone.now()
    for name in model_names:
        model = apps.get_model(app_label, name)
        history = apps.get_model(app_label, f"Historical{name}")
        tracked = {f.attname for f in history._meta.fields} & {
            f.attname for f in model._meta.fields}
        rows = [
            history(**{a: getattr(obj, a) for a in tracked}, history_date=now,
                    history_type="~", history_change_reason=BASELINE_REASON,
                    history_source=Source.SYSTEM)
            for obj in model.objects.all().iterator()
        ]
        history.objects.bulk_create(rows, batch_size=batch_size)
