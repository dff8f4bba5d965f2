"""The API double's error answers: Status objects worded as the API server words them."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An answer other than 2xx, rendered as a `kind: Status` object."""

    REASONS = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "AlreadyExists",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }

    def __init__(
        self, code: int, message: str, *, reason: str | None = None, details: dict | None = None
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.details = details or {}

    def status_object(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404, f'{qualified} "{name}" not found',
        details={"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409, f'{qualified} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource},
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> ApiError:
    """A 422 worded like the API server's: `Job.batch "x" is invalid: field: message`."""
    qualified = f"{kind}.{group}" if group else kind
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(
        422, f'{qualified} "{name}" is invalid: {text}',
        details={
            "name": name, "group": group, "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
            ],
        },
    )


def forbidden_create(resource: str, name: str, namespace: str = "", group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return ApiError(
        403,
        f'{qualified} "{name}" is forbidden: User "system:serviceaccount:allot:allot" cannot '
        f'create resource "{resource}" in API group "{group}"{where}',
        details={"name": name, "group": group, "kind": resource},
    )
