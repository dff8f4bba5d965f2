"""Error responses outside DRF's views: JSON under `/api/`, HTML pages elsewhere.

DRF's views answer their own errors in JSON (`portal.api_errors`). What happens before a view
is found, or outside DRF, comes here: `urls.py` names these handlers (handler400, 403, 404,
500) and sends every unknown `/api/` path to `api_not_found`; `ErrorMiddleware` refuses a
parameter holding a NUL character, answers a database outage with a 503 and Retry-After on
every path, and keeps `/api/` answers JSON even with DEBUG on (where Django would show its
HTML debug pages).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponsePermanentRedirect,
    JsonResponse,
)
from django.template import loader
from django.urls import Resolver404, resolve
from django.utils.html import escape
from django.views import defaults

from portal.api_errors import RETRY_AFTER_S, UNAVAILABLE, database_unavailable, logger

API_PREFIX = "/api/"


def is_api(request: HttpRequest) -> bool:
    """Whether the request is for the API (JSON errors) rather than a page (HTML errors)."""
    return request.path.startswith(API_PREFIX)


def _json(status: int, detail: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"detail": detail}, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


def unavailable(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After; the page is rendered without the request, so it runs no query."""
    retry = {"Retry-After": str(RETRY_AFTER_S)}
    if is_api(request):
        return _json(503, UNAVAILABLE, **retry)
    html = loader.get_template("503.html").render({"retry_after_s": RETRY_AFTER_S})
    response = HttpResponse(html, status=503)
    response["Retry-After"] = retry["Retry-After"]
    return response


def _too_large() -> str:
    return (f"request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
            "(DATA_UPLOAD_MAX_MEMORY_SIZE)")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: a malformed request (or a body over DATA_UPLOAD_MAX_MEMORY_SIZE: 413)."""
    if isinstance(exception, RequestDataTooBig):
        if is_api(request):
            return _json(413, _too_large())
        return HttpResponse(f"<h1>Request too large</h1><p>{_too_large()}</p>", status=413)
    if is_api(request):
        # A SuspiciousOperation's own text may name internals: only BadRequest's is shown.
        detail = str(exception) if type(exception) is BadRequest else "bad request"
        return _json(400, detail or "bad request")
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403."""
    if is_api(request):
        return _json(403, str(exception) or "you may not do this")
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404."""
    if is_api(request):
        if isinstance(exception, Resolver404):
            return api_not_found(request)
        return _json(404, _not_found(exception))
    return defaults.page_not_found(request, exception)


def _not_found(exception: Exception) -> str:
    return str(exception) if isinstance(exception, Http404) and str(exception) else "not found"


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500 (called while the exception is being handled: sys.exception() is it)."""
    if database_unavailable(sys.exception()):
        return unavailable(request)
    if is_api(request):
        return _json(500, "internal server error")
    return defaults.server_error(request)


def page_missing(request: HttpRequest, rest: str = "") -> HttpResponse:
    """The last page route: no other matched. The product's 404 page (DEBUG on too), or the
    address with a slash added when that one exists (what CommonMiddleware's APPEND_SLASH
    would do, which a catch-all route stops)."""
    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not page_missing and request.method == "GET":
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(request.path + "/" + (f"?{query}" if query
                                                                        else ""))
    return defaults.page_not_found(request, Http404(f"no page at {request.path}"))


def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """404 for a path under /api/ that names no endpoint (saying so when a slash is missing)."""
    detail = f"no API endpoint at {request.path}"
    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            detail += f" (did you mean {request.path}/?)"
    return _json(404, detail)


def _nul_parameter(request: HttpRequest) -> str | None:
    """The first query or form parameter (of a page) that holds a NUL character."""
    params = [request.GET]
    if not is_api(request) and request.method == "POST":
        params.append(request.POST)  # the API's parsers check its bodies
    for data in params:
        for key, values in data.lists():
            if "\x00" in key or any("\x00" in v for v in values if isinstance(v, str)):
                return key
    return None


class ErrorMiddleware:
    """Parameters holding a NUL character (which PostgreSQL can neither store nor compare):
    400. Database outages: 503 with Retry-After. Under /api/: every error in JSON."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        key = _nul_parameter(request)
        if key is None:
            return self.get_response(request)
        detail = f"NUL character (U+0000) in parameter {key!r}: text may not contain NUL"
        if is_api(request):
            return _json(400, detail)
        return HttpResponseBadRequest(f"<h1>Bad request</h1><p>{escape(detail)}</p>")

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        if database_unavailable(exception):
            logger.error("Service Unavailable: %s", request.path, exc_info=exception,
                         extra={"status_code": 503, "request": request})
            return unavailable(request)
        if not is_api(request):
            # Missing and forbidden pages get the product's own pages with DEBUG on too (a
            # lead following an old link must not land on Django's debug page); other errors
            # keep Django's handlers (its debug page for a developer).
            if isinstance(exception, Http404):
                return page_not_found(request, exception)
            if isinstance(exception, PermissionDenied):
                return permission_denied(request, exception)
            return None
        if isinstance(exception, Http404):
            return _json(404, _not_found(exception))
        if isinstance(exception, PermissionDenied):
            return permission_denied(request, exception)
        if isinstance(exception, BadRequest | SuspiciousOperation):
            return bad_request(request, exception)
        logger.error("Internal Server Error: %s", request.path, exc_info=exception,
                     extra={"status_code": 500, "request": request})
        detail = "internal server error"
        if settings.DEBUG:
            detail += f" ({type(exception).__name__}: {exception})"
        return _json(500, detail)
