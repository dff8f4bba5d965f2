"""The API's body parsers (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES): DRF's, with limits.

A JSON body is refused with a 400 naming the limit when it nests deeper than MAX_JSON_DEPTH
(Python's decoder recurses once per level and fails with a RecursionError near 1,000 levels,
and every serializer and JSON column after it recurses too), and with a 413 when it is larger
than DATA_UPLOAD_MAX_MEMORY_SIZE. No body may carry a NUL character (U+0000): PostgreSQL can
neither store nor compare one in a text or jsonb column, so it would fail in the database
instead of being refused here with the place it was found.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.http import QueryDict
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import get_encoding  # type: ignore[attr-defined]

MAX_JSON_DEPTH = 64

# A JSON string (the unrolled form runs in linear time), and anything but a bracket.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request body too large"
    default_code = "payload_too_large"


def too_large(limit: int | None) -> PayloadTooLarge:
    """The 413 for a body over DATA_UPLOAD_MAX_MEMORY_SIZE, with the limit in bytes."""
    return PayloadTooLarge(f"request body larger than {limit} bytes "
                           "(DATA_UPLOAD_MAX_MEMORY_SIZE)")


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether the JSON text nests arrays and objects deeper than `limit` (strings skipped)."""
    depth = 0
    for char in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _where(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)


def nul_at(data: Any, path: str = "") -> str | None:
    """Where the first NUL character in parsed JSON is (e.g. `labels` key, `pods[0].name`)."""
    if isinstance(data, str):
        return (path or "the body") if "\x00" in data else None
    if isinstance(data, Mapping):
        for key, value in data.items():
            if "\x00" in key:
                return f"a key of {path or 'the body'} ({key!r})"
            found = nul_at(value, _where(path, key))
            if found:
                return found
    if isinstance(data, list):
        for i, value in enumerate(data):
            found = nul_at(value, _where(path, i))
            if found:
                return found
    return None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _refuse_nul(where: str) -> ParseError:
    return ParseError(f"NUL character (U+0000) in {where}: text may not contain NUL")


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser with a size limit, a depth limit and no NUL characters."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise too_large(limit)
        encoding = get_encoding(parser_context or {})
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding}: {exc}") from exc
        if json_depth_exceeds(text, MAX_JSON_DEPTH):
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            data = json.loads(text, parse_constant=_refuse_constant if self.strict else None)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        # A NUL can only come as the escape \u0000 (raw control characters are invalid JSON).
        where = nul_at(data) if "\\u0000" in text else None
        if where:
            raise _refuse_nul(where)
        return data


def _form_nul(data: QueryDict) -> None:
    for key, values in data.lists():
        if "\x00" in key:
            raise _refuse_nul(f"a form field's name ({key!r})")
        if any("\x00" in value for value in values if isinstance(value, str)):
            raise _refuse_nul(f"form field {key!r}")


class FormParser(parsers.FormParser):
    """DRF's form parser, refusing NUL characters."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        _form_nul(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser, refusing NUL characters in its fields."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> parsers.DataAndFiles:
        parsed = super().parse(stream, media_type, parser_context)
        _form_nul(parsed.data)
        return parsed
