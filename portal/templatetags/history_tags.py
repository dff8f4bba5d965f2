"""`{% history_section %}`: an object's recent changes on its page (its History section)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.urls import reverse

register = template.Library()

SECTION_ROWS = 10


@register.inclusion_tag("portal/partials/history_section.html")
def history_section(kind: str = "", pk: Any = None, kinds: str = "",
                    rows: int = SECTION_ROWS) -> dict[str, Any]:
    """The History section of a page: the latest changes of one object (`"queue" queue.pk`:
    the queue and its quotas) or of `kinds` ("cluster,node"), with a link to the history page.

    The page carries only the section's frame: its rows come from `history_section_rows`
    once the page has loaded (htmx), so a page costs no more to render with its history.
    """
    query = section_query(kind, pk, kinds)
    return {
        "section_url": f"{reverse('history-section')}?"
                       f"{urlencode([*query, ('rows', rows), ('hide', kind)])}",
        "history_url": f"{reverse('history')}?{urlencode(query)}",
    }


def section_query(kind: str, pk: Any, kinds: str) -> list[tuple[str, str]]:
    """The history page's filters for one object (`kind:pk`) or for some kinds."""
    ref = f"{kind}:{pk}" if kind and pk is not None else ""
    query: list[tuple[str, str]] = [("object", ref)] if ref else []
    return query + [("type", k) for k in kinds.split(",") if k]
