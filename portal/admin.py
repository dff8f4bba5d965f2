"""Admin for accounts: API tokens (listed and revoked here; issued through the API)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Only hashes are stored, so a token can be seen by prefix and revoked, never read."""

    list_display = ("user", "prefix", "scope", "created_at", "expires_at", "last_used_at")
    list_select_related = ("user",)
    list_filter = ("scope",)
    search_fields = ("user__username", "prefix")
    readonly_fields = ("user", "prefix", "key_hash", "scope", "created_at", "expires_at",
                       "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
