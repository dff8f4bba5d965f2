"""Sortable columns and CSV export for the list pages (workloads, queues, history, invoices,
approvals): `?sort=col` (ascending) or `?sort=-col` (descending) over a whitelist of columns
per page, and `?format=csv`, which exports every row the page's filters select (not only the
page shown) in the same order, at most CSV_MAX_ROWS rows, streamed as it is written (the
rows read from the database in chunks while the response is sent).

A column outside the whitelist is refused with 400 naming the column and the allowed ones
(the page still renders, in its default order, with the error above the table)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse

CSV_MAX_ROWS = 100_000


@dataclass(frozen=True)
class Sort:
    """The sort a list page applies: `column` (a whitelisted name), `descending`, the ORM
    fields (or row keys) it orders by, and `error` when the request asked for another."""

    param: str
    column: str
    descending: bool
    fields: tuple[str, ...]
    columns: tuple[str, ...]
    error: str = ""

    @property
    def key(self) -> str:
        return f"-{self.column}" if self.descending else self.column

    def order_by(self) -> list[str]:
        """The ORM ordering (each field reversed when descending)."""
        out = []
        for f in self.fields:
            rev = f.startswith("-") != self.descending
            out.append(f"-{f.lstrip('-')}" if rev else f.lstrip("-"))
        return out

    def rows_sorted(self, rows: list[Any], value: Callable[[Any, str], Any]) -> list[Any]:
        """Plain rows sorted in Python by the same whitelist (`value(row, field)`); None
        values go last whichever the direction."""
        field = self.fields[0].lstrip("-")

        def key(row: Any) -> tuple[bool, Any]:
            v = value(row, field)
            return (v is None) != self.descending, v if v is not None else 0

        return sorted(rows, key=key, reverse=self.descending)


def sort_from(request: HttpRequest, columns: Mapping[str, Sequence[str]], default: str,
              *, param: str = "sort") -> Sort:
    """The sort asked by `?<param>=col` or `-col` among `columns` (name -> fields), else
    `default` (itself `col` or `-col`); an unknown column gives `error` and the default."""
    raw = request.GET.get(param, "").strip()
    error = ""
    wanted = raw or default
    name = wanted.lstrip("-")
    if name not in columns:
        error = (f"{param}: {name!r} is not a column of this list; one of "
                 f"{', '.join(columns)} (prefix - for descending)")
        wanted, name = default, default.lstrip("-")
    return Sort(param=param, column=name, descending=wanted.startswith("-"),
                fields=tuple(columns[name]), columns=tuple(columns), error=error)


def wants_csv(request: HttpRequest) -> bool:
    """Whether the list is asked as CSV (`?format=csv`)."""
    return request.GET.get("format", "").lower() == "csv"


CSV_CHUNK_ROWS = 500  # rows per chunk sent: a few tens of KB


class _Echo:
    """A file-like object whose write returns the line: csv.writer then yields text."""

    def write(self, value: str) -> str:
        return value


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """The CSV text in chunks of CSV_CHUNK_ROWS rows, the header first, read from `rows` as
    they are sent (at most CSV_MAX_ROWS rows)."""
    writer = csv.writer(_Echo())
    chunk = [writer.writerow(header)]
    for n, row in enumerate(rows):
        if n >= CSV_MAX_ROWS:
            break
        chunk.append(writer.writerow(["" if v is None else v for v in row]))
        if len(chunk) >= CSV_CHUNK_ROWS:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


def csv_response(filename: str, header: Sequence[str],
                 rows: Iterable[Sequence[Any]]) -> StreamingHttpResponse:
    """A CSV download streamed as it is written: `rows` (a generator over a chunked
    queryset iteration, not a list) are read while the response is sent, so a long export
    holds one chunk in memory, not the file (at most CSV_MAX_ROWS rows after the header)."""
    response = StreamingHttpResponse(csv_lines(header, rows),
                                     content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
