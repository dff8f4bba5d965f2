"""The history page: every change the user may see, filterable, newest first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    QueryDict,
)
from django.shortcuts import render
from django.urls import reverse

from core.listing import csv_response, sort_from, wants_csv
from portal.history import selectors
from portal.history.filters import HistoryFilter
from portal.history.kinds import BY_KEY
from portal.pages.access import is_platform_admin

PAGE_SIZE = 50
# The history's sortable columns (?sort=col / -col): the union's own columns.
HISTORY_SORT = {"when": ("history_date",), "kind": ("history_kind",)}
SECTION_ROWS = 10


@login_required
def history_list(request: HttpRequest) -> HttpResponseBase:
    """Changes by object type, object, user, path and date range (400 on a bad filter)."""
    filterset = HistoryFilter(request.GET or None,
                              parts=selectors.history_querysets(user=request.user))
    valid = filterset.is_valid() if filterset.is_bound else True
    sort = sort_from(request, HISTORY_SORT, "-when")
    rows = filterset.qs if valid else []
    if not isinstance(rows, list):
        rows = rows.order_by(*sort.order_by(), "-history_id")
    if valid and wants_csv(request) and not sort.error:
        return csv_response("history.csv", (
            "when", "kind", "object", "user", "path", "action", "reason", "changes"), (
            (e.at.isoformat(), e.kind, e.object_label, e.user or "", e.source, e.action,
             e.reason, "; ".join(f"{c.label}: {c.before_text} -> {c.after_text}"
                                 for c in e.changes))
            for chunk in _chunks(rows) for e in selectors.history_entries(chunk)))
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page")) if valid else None
    entries = selectors.history_entries(list(page.object_list)) if page is not None else []
    return render(request, "portal/history.html", {
        "filter": filterset, "page": page, "entries": entries, "sort": sort,
        "is_admin": is_platform_admin(request.user),
    }, status=200 if valid and not sort.error else 400)


def _chunks(rows: Any, size: int = 1000) -> Iterator[list[Any]]:
    """The union's rows in lists of `size` (each read with its entries' queries)."""
    chunk: list[Any] = []
    for row in rows.iterator() if hasattr(rows, "iterator") else rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@login_required
def history_section_rows(request: HttpRequest) -> HttpResponse:
    """A page's History section, filled in after the page has loaded (`{% history_section %}`):
    the latest `rows` changes the user may see of an object or of some kinds."""
    try:
        rows = max(1, min(int(request.GET.get("rows", SECTION_ROWS)), PAGE_SIZE))
    except ValueError:
        rows = SECTION_ROWS
    wanted = request.GET.getlist("type") or None
    unknown = sorted(set(wanted or ()) - set(BY_KEY))
    if unknown:
        return HttpResponseBadRequest(
            f"unknown type(s) {', '.join(map(repr, unknown))}: one of {', '.join(BY_KEY)}",
            content_type="text/plain; charset=utf-8")
    query = [(k, v) for k, v in request.GET.items() if k in ("object",)]
    query += [("type", k) for k in wanted or ()]
    filterset = HistoryFilter(QueryDict(urlencode(query)),
                              parts=selectors.history_querysets(user=request.user, kinds=wanted))
    found = list(filterset.qs[:rows + 1]) if filterset.is_valid() else []
    return render(request, "portal/partials/history_section_rows.html", {
        "entries": selectors.history_entries(found[:rows]),
        "more": len(found) > rows,
        "more_label": "newest first, filterable",
        "history_url": f"{reverse('history')}?{urlencode(query)}",
        "hide_object": request.GET.get("hide", "") if request.GET.get("object") else "",
    })
