"""API errors as API.md says: JSON bodies; 401 for anonymous callers; 404 for foreign objects;
503 while the database cannot be reached.

DRF answers what it raises itself; this adds Django's own request errors (a body over
DATA_UPLOAD_MAX_MEMORY_SIZE: 413; too many form fields: 400), services' ValidationErrors (400)
and a database that cannot be reached (503 with Retry-After). `portal.errors` answers the
same shapes for what happens outside DRF's views (unknown `/api/` paths, middleware).
"""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError, connection
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.parsers import too_large

logger = logging.getLogger("django.request")

RETRY_AFTER_S = 5
UNAVAILABLE = "the database is unavailable; try again shortly"


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether `exc` says the database cannot be reached (no connection could be made, or the
    one in use was lost), as opposed to a statement that failed on a live connection (a
    deadlock, a constraint: a bug, left to answer 500)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    raw = connection.connection
    return raw is None or bool(getattr(raw, "closed", False)) or bool(
        getattr(raw, "broken", False))


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus Django's request errors, services' ValidationErrors and outages."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "message_dict"):
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        # `errors` keeps each message apart (a tree change may break several rules at once).
        return Response(
            {"detail": "; ".join(exc.messages), "errors": exc.messages},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, RequestDataTooBig):
        exc = too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    elif isinstance(exc, TooManyFieldsSent):
        exc = ParseError(f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} form fields "
                         "(DATA_UPLOAD_MAX_NUMBER_FIELDS)")
    elif database_unavailable(exc):
        request = context.get("request")
        logger.error("Service Unavailable: %s", getattr(request, "path", "?"), exc_info=exc)
        return Response({"detail": UNAVAILABLE}, status=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Retry-After": str(RETRY_AFTER_S)})
    return drf_exception_handler(exc, context)
