"""HTTP to the portal's `/api/v1/`: requests with the token, answers turned into data or into
a `CliError` with the exit code of docs/cli.md and the API's own message."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import requests

from allot_cli import __version__
from allot_cli.config import Target
from allot_cli.errors import CliError, Exit

# Statuses that mean "the server is not there for you right now", as a refused connection:
# a proxy with no backend (502), the database down (503, with Retry-After), a gateway timeout.
UNAVAILABLE = (502, 503, 504)
PAGE_SIZE = 1000  # the most items the API gives in one page (`?page_size=`)


def _reason(exc: BaseException) -> str:
    # requests wraps urllib3's error in prose; the errno's text is what a person needs.
    text = str(exc)
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if found:
        return found.group(1).strip()
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    if isinstance(exc, requests.exceptions.SSLError):
        verify = re.search(r"certificate verify failed[^'\")]*", text)
        return "TLS error: " + (verify.group(0) if verify else text[:200])
    return type(exc).__name__


def _lines(body: Any, prefix: str = "") -> list[str]:
    """The messages of an error body, one per line, each after the field it is about."""
    if isinstance(body, Mapping):
        out: list[str] = []
        if "detail" in body and isinstance(body["detail"], str):
            errors = body.get("errors")  # a tree rule's refusal: the detail joins them
            if isinstance(errors, list) and errors:
                return [str(e) for e in errors]
            out.append(body["detail"])
            for reason in body.get("reasons") or []:
                if isinstance(reason, Mapping):
                    out.append(f"  {reason.get('code', '')}: {reason.get('message', '')}")
            return out
        for key, value in body.items():
            name = key if key != "non_field_errors" else ""
            out += _lines(value, f"{prefix}.{name}" if prefix and name else prefix or name)
        return out
    if isinstance(body, list):  # DRF's errors of a list of objects: one per item, {} if fine
        return [line for i, item in enumerate(body)
                for line in _lines(item, f"{prefix}[{i}]" if isinstance(item, Mapping)
                                   else prefix)]
    text = str(body)
    return [f"{prefix}: {text}" if prefix else text]


def _body(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def error_message(response: requests.Response) -> str:
    """What the API said, in lines (its JSON body's messages, else its text)."""
    body = _body(response)
    if body is None:
        text = " ".join(response.text.split())[:300]
        return f"HTTP {response.status_code} {response.reason}" + (f": {text}" if text else "")
    lines = _lines(body)
    return "\n".join(lines) if lines else f"HTTP {response.status_code} {response.reason}"


def refusal(response: requests.Response) -> CliError:
    """The error a non-2xx answer becomes, with its exit code."""
    status, message = response.status_code, error_message(response)
    code = {401: Exit.AUTH, 403: Exit.AUTH, 404: Exit.NOT_FOUND}.get(status, Exit.REFUSED)
    if status == 401:
        message += "\n(sign in again: allot login)"
    elif status in UNAVAILABLE:
        code = Exit.UNREACHABLE
        wait = response.headers.get("Retry-After")
        message = f"the server is unavailable ({status}): {message}" + (
            f" (retry after {wait} s)" if wait else "")
    elif status >= 500:
        message = f"the server failed ({status}): {message}"
    return CliError(code, message, status=status, body=_body(response))


class Api:
    """One server: JSON in and out, the token in `Authorization: Token ...`."""

    def __init__(self, target: Target, *, timeout: float = 30.0) -> None:
        self.server = target.server
        self.token = target.token
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"allot-cli/{__version__}"
        self.session.headers["Accept"] = "application/json"

    def call(self, method: str, path: str, *, params: Any = None, body: Any = None,
             auth: bool = True) -> requests.Response:
        """Send one request (path relative to /api/v1/); a CliError unless the answer is 2xx."""
        headers = {}
        if auth:
            if not self.token:
                raise CliError(Exit.AUTH, f"not signed in to {self.server}: run `allot login` "
                                          "or set ALLOT_TOKEN")
            headers["Authorization"] = f"Token {self.token}"
        url = f"{self.server}/api/v1/{path.lstrip('/')}"
        try:
            response = self.session.request(method, url, params=params, json=body,
                                            headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise CliError(Exit.UNREACHABLE,
                           f"cannot reach {self.server}: {_reason(exc)}") from exc
        if not 200 <= response.status_code < 300:
            raise refusal(response)
        return response

    def get(self, path: str, params: Any = None) -> Any:
        """GET, the JSON answer."""
        return _json(self.call("GET", path, params=params))

    def post(self, path: str, body: Any = None, *, auth: bool = True) -> Any:
        """POST a JSON body, the JSON answer."""
        return _json(self.call("POST", path, body=body if body is not None else {}, auth=auth))

    def delete(self, path: str) -> Any:
        """DELETE, the JSON answer (None when empty)."""
        return _json(self.call("DELETE", path))

    def pages(self, path: str, params: dict[str, Any], limit: int | None
              ) -> tuple[list[dict[str, Any]], int]:
        """The items of a paginated list, read page after page (`?page=N`, pages of up to
        PAGE_SIZE) until `limit` items (None: all of them), and the total the server counts.
        A server that ignores `page_size` gives smaller pages: still read to the end."""
        items: list[dict[str, Any]] = []
        page, total = 1, 0
        size = PAGE_SIZE if limit is None else min(limit, PAGE_SIZE)
        while limit is None or len(items) < limit:
            data = self.get(path, {**params, "page": page, "page_size": size})
            total = int(data.get("count", 0))
            items += data.get("results", [])
            if not data.get("next"):
                break
            page += 1
        return (items if limit is None else items[:limit]), total


def _json(response: requests.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError as exc:
        raise CliError(Exit.REFUSED, f"the server answered {response.status_code} but not "
                       f"with JSON: {response.text[:200]!r} (is {response.url} Allot?)") from exc
