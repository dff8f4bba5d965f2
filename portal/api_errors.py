"""API errors as API.md says: JSON bodies; 401 for anonymous callers; 404 for foreign objects."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus Django ValidationErrors raised by services turned into 400s."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "message_dict"):
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        # `errors` keeps each message apart (a tree change may break several rules at once).
        return Response(
            {"detail": "; ".join(exc.messages), "errors": exc.messages},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return drf_exception_handler(exc, context)
