"""API errors as API.md says: JSON bodies; 401 for anonymous callers; 404 for foreign objects;
503 while the database cannot be reached."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError, connection
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

# Seconds a client is asked to wait before trying again while the database is down.
RETRY_AFTER_S = 5


def database_unreachable(exc: Exception) -> bool:
    """Whether `exc` says the database cannot be reached (no connection could be made, or the
    one in use was lost), as opposed to a statement that failed on a live connection (a
    deadlock, a constraint: a bug, left to answer 500)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    raw = connection.connection
    return raw is None or bool(getattr(raw, "closed", False)) or bool(
        getattr(raw, "broken", False))


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus Django ValidationErrors raised by services turned into 400s, and a
    database that cannot be reached into a 503 with Retry-After."""
    if database_unreachable(exc):
        return Response({"detail": "the database is unavailable; try again shortly"},
                        status=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "message_dict"):
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        # `errors` keeps each message apart (a tree change may break several rules at once).
        return Response(
            {"detail": "; ".join(exc.messages), "errors": exc.messages},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return drf_exception_handler(exc, context)
