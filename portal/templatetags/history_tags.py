"""`{% history_section %}`: an object's recent changes on its page (its History section)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.http import QueryDict
from django.urls import reverse

from portal.history import selectors
from portal.history.filters import HistoryFilter

register = template.Library()

SECTION_ROWS = 10


@register.inclusion_tag("portal/partials/history_section.html", takes_context=True)
def history_section(context: dict[str, Any], kind: str = "", pk: Any = None, kinds: str = "",
                    rows: int = SECTION_ROWS) -> dict[str, Any]:
    """The latest changes of one object (`"queue" queue.pk`: the queue and its quotas) or of
    `kinds` ("cluster,node"), as the page's user may see them, with a link to the history page.

    On the page it reads through the same selectors and FilterSet as the history page: the
    rows the user may see, then one query per kind and per related model for the entries.
    """
    user = context["request"].user
    ref = f"{kind}:{pk}" if kind and pk is not None else ""
    wanted = [k for k in kinds.split(",") if k] or None
    query: list[tuple[str, str]] = [("object", ref)] if ref else []
    query += [("type", k) for k in wanted or ()]
    filterset = HistoryFilter(QueryDict(urlencode(query)),
                              parts=selectors.history_querysets(
                                  user=user, kinds=wanted, scope=context.get("scope")))
    found = list(filterset.qs[:rows + 1]) if filterset.is_valid() else []
    return {
        "entries": selectors.history_entries(found[:rows]),
        "more": len(found) > rows,
        "more_label": "newest first, filterable",
        "history_url": f"{reverse('history')}?{urlencode(query)}",
        "hide_object": kind if ref else "",
    }
