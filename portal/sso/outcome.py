"""Why a single sign-on attempt failed, carried on the request from the backend (which can
only answer None) to the view that tells the user."""

from __future__ import annotations

from typing import Any

_ATTR = "allot_sso_error"


def note_error(request: Any, message: str) -> None:
    """Remember why this request's sign-in failed (the provider or directory, not the user)."""
    if request is not None:
        setattr(request, _ATTR, message)


def noted_error(request: Any) -> str | None:
    """The reason noted for this request's failed sign-in, if any."""
    return getattr(request, _ATTR, None)
