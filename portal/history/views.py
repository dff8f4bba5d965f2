"""The history page: every change the user may see, filterable, newest first."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.history import selectors
from portal.history.filters import HistoryFilter
from portal.pages.access import is_platform_admin

PAGE_SIZE = 50


@login_required
def history_list(request: HttpRequest) -> HttpResponse:
    """Changes by object type, object, user, path and date range (400 on a bad filter)."""
    filterset = HistoryFilter(request.GET or None,
                              parts=selectors.history_querysets(user=request.user))
    valid = filterset.is_valid() if filterset.is_bound else True
    page = Paginator(filterset.qs, PAGE_SIZE).get_page(request.GET.get("page")) if valid else None
    entries = selectors.history_entries(list(page.object_list)) if page is not None else []
    return render(request, "portal/history.html", {
        "filter": filterset, "page": page, "entries": entries,
        "is_admin": is_platform_admin(request.user),
    }, status=200 if valid else 400)
