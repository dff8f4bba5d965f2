"""CSV exports stream: the rows are read while the response is sent, in chunks, the header
first, at most CSV_MAX_ROWS rows, None as an empty cell."""

from __future__ import annotations

import csv
import io

from django.http import StreamingHttpResponse

from core import listing


def _rows(read: list[int], n: int):
    for i in range(n):
        read.append(i)
        yield (i, f"name,{i}", None)


def test_the_response_streams_and_reads_rows_only_while_sent(monkeypatch):
    monkeypatch.setattr(listing, "CSV_CHUNK_ROWS", 10)
    read: list[int] = []
    response = listing.csv_response("x.csv", ("id", "name", "note"), _rows(read, 25))
    assert isinstance(response, StreamingHttpResponse) and response.streaming
    assert response["Content-Disposition"] == 'attachment; filename="x.csv"'
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert read == []  # nothing read before it is sent
    chunks = iter(response.streaming_content)
    first = next(chunks).decode()
    assert first.startswith("id,name,note\r\n")
    assert len(read) <= 11  # one chunk of rows read (plus the one that filled it)
    body = first + b"".join(chunks).decode()
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0] == ["id", "name", "note"]
    assert rows[1:] == [[str(i), f"name,{i}", ""] for i in range(25)]
    assert read == list(range(25))


def test_at_most_csv_max_rows_and_an_empty_list_still_has_its_header(monkeypatch):
    monkeypatch.setattr(listing, "CSV_MAX_ROWS", 3)
    read: list[int] = []
    body = b"".join(listing.csv_response("x.csv", ("id",), _rows(read, 10))
                    .streaming_content).decode()
    assert [r[0] for r in csv.reader(io.StringIO(body))] == ["id", "0", "1", "2"]
    assert read == [0, 1, 2, 3]  # the 4th read shows the cap, no more
    empty = b"".join(listing.csv_response("x.csv", ("id", "name"), iter(()))
                     .streaming_content).decode()
    assert empty == "id,name\r\n"
