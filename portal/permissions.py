"""API permissions: members read, platform admins write (403 with a clear detail otherwise)."""

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView


def is_platform_admin(user) -> bool:  # type: ignore[no-untyped-def]
    """Platform admins (staff) may change the tree, flavors and clusters."""
    return bool(user and user.is_authenticated and (user.is_staff or user.is_superuser))


class IsAdminOrReadOnly(BasePermission):
    """Any signed-in user reads; only platform admins write."""

    message = "Only platform admins may change this; members can read it."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_platform_admin(request.user)
