"""The admin side of the change history: each tracked model's "History" page."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from simple_history.admin import SimpleHistoryAdmin


class HistoryAdmin(SimpleHistoryAdmin):
    """SimpleHistoryAdmin with the path column, read-only history and no empty rows.

    Reverting from a historical version is off: it would save the old values around the
    services (the tree rules, policy versions); an admin edits the object instead.
    """

    history_list_display = ["source"]

    @staticmethod
    def source(record: Any) -> str:
        return str(record.get_history_source_display())

    def revert_disabled(self, request: HttpRequest, obj: Any = None) -> bool:
        return True

    def history_form_view(self, request: HttpRequest, object_id: str, version_id: str,
                          extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "POST":
            raise PermissionDenied("reverting from the history is off: change the object itself")
        return super().history_form_view(request, object_id, version_id, extra_context)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change and not form.has_changed():
            return  # saved unchanged: no save, so no empty row in its history
        super().save_model(request, obj, form, change)
