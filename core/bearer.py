"""Endpoints a scraper reads (Prometheus): a bearer token from a setting, or a logged-in staff
user; nobody else. One check, so every such endpoint answers the same way."""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse


def bearer_refusal(request: HttpRequest, *, token: str, setting: str, needs: str,
                   realm: str) -> HttpResponse | None:
    """None when the request may read; otherwise the answer saying why not: 401 for a wrong or
    missing token (a bearer token is refused outright while `setting` is empty), 403 for a
    signed-in user who is not staff. `needs` says what the endpoint accepts."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        if token and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        reason = ("bearer token refused: " if token else
                  f"no {setting} is set, so no bearer token is accepted: ")
        return _unauthorized(reason + needs, realm)
    user = request.user
    if user.is_authenticated and user.is_staff:
        return None
    if user.is_authenticated:
        return HttpResponse(f"{user.get_username()} is not staff: {needs}\n", status=403,
                            content_type="text/plain; charset=utf-8")
    return _unauthorized(needs, realm)


def _unauthorized(message: str, realm: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = f'Bearer realm="{realm}"'
    return response
