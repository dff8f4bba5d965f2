"""`{% reason code message %}`: a reason in plain words with a "details" toggle holding the
engine's exact text (`scheduling.reasons`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from scheduling.reasons import ids_in, reason_plain, workload_names

register = template.Library()


@register.simple_tag(takes_context=True)
def reason(context: template.Context, code: str, message: str, details: bool = True
           ) -> SafeString:
    """The plain sentence; then, unless `details` is False, the exact text behind a toggle."""
    request: Any = context.get("request")
    user = getattr(request, "user", None)
    names = workload_names(user, ids_in([message or ""]))
    plain = reason_plain(str(code or ""), message or "", names=names)
    if not details or not message:
        return format_html('<span class="reason-plain">{}</span>', plain.html)
    return format_html(
        '<span class="reason-plain">{}</span> <details class="reason-details"><summary>'
        'details</summary><code>{}</code> {}</details>', plain.html, code, message)
