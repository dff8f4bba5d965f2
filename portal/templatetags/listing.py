"""`{% sort_th sort "col" "Label" %}`: a sortable column header (a link that keeps the page's
filters, `aria-sort` on the sorted one); `{% csv_link "Label" %}`: the list as CSV, with the
same filters and sort."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()


def _query(request: Any, **changes: str) -> str:
    q = request.GET.copy()
    q.pop("page", None)
    for k, v in changes.items():
        q[k] = v
    return q.urlencode()


@register.simple_tag(takes_context=True)
def sort_th(context: Any, sort: Any, column: str, label: str, extra_class: str = "") -> str:
    """A <th> whose link sorts by `column` (ascending first; again: descending); a plain <th>
    where the list is embedded in another page (`embedded`: the dashboard's tree)."""
    if context.get("embedded"):
        return format_html('<th{} scope="col">{}</th>',
                           format_html(' class="{}"', extra_class) if extra_class else "", label)
    request = context["request"]
    current = sort is not None and sort.column == column
    descending = current and sort.descending
    target = column if (not current or descending) else f"-{column}"
    aria = ("descending" if descending else "ascending") if current else "none"
    arrow = (" ▼" if descending else " ▲") if current else ""
    direction = "descending" if target.startswith("-") else "ascending"
    return format_html(
        '<th{} aria-sort="{}" scope="col"><a class="sort" href="?{}" '
        'title="Sort by {} ({})">{}<span aria-hidden="true">{}</span></a></th>',
        format_html(' class="{}"', extra_class) if extra_class else "", aria,
        _query(request, **{sort.param if sort is not None else "sort": target}), label,
        direction, label, arrow)


@register.simple_tag(takes_context=True)
def csv_link(context: Any, label: str = "Download CSV", **extra: str) -> str:
    """A link to the same list as CSV (its filters and sort kept); nothing where the list is
    embedded in another page."""
    if context.get("embedded"):
        return ""
    return format_html('<a class="button csv-link" href="?{}">{}</a>',
                       _query(context["request"], format="csv", **extra), label)
