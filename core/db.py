"""Every switch between the database vendors, in one module: locks, bulk writes, prepared
statements and array parameters.

Production and the tests run on PostgreSQL; `make run` serves on SQLite. Where PostgreSQL has
a feature the hot paths rely on (advisory locks, COPY, server-side prepared statements), the
function here uses it, and elsewhere falls back to what one machine with SQLite can do: file
locks instead of advisory locks, Django's portable bulk writes, plain cursors.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pglock
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections, transaction
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import F
from django.db.models.expressions import RawSQL


def postgres(using: str = DEFAULT_DB_ALIAS) -> bool:
    """True when `using` is PostgreSQL (advisory locks, COPY, the change log are there)."""
    return connections[using].vendor == "postgresql"


# --- advisory locks ------------------------------------------------------------------------


@contextlib.contextmanager
def xact_lock(key: int, *, wait: bool, name: str) -> Iterator[bool]:
    """A new transaction holding lock `key` until it ends; yields False (do no work) when
    `wait` is False and another process holds it.

    PostgreSQL: a transaction-level advisory lock. Elsewhere (SQLite: one machine, several
    processes: web, worker, beat) an exclusive file lock `name` under VAR_DIR.
    """
    if postgres():
        with transaction.atomic():
            # No timeout when waiting: pglock then sends the bare pg_advisory_xact_lock (a
            # timeout would add a SET, a savepoint and a RESET to every cycle).
            lock = pglock.advisory(key, xact=True) if wait else pglock.advisory(
                key, xact=True, timeout=0)
            got = lock.acquire()
            yield bool(got)
        return
    path = Path(settings.VAR_DIR) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            with transaction.atomic():
                yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def xact_lock_join(key: int) -> None:
    """Wait for lock `key` inside the caller's open transaction, held until it ends
    (PostgreSQL; elsewhere SQLite's one writer at a time already serialises)."""
    if postgres():
        pglock.advisory(key, xact=True).acquire()


@contextlib.contextmanager
def session_lock(key: int) -> Iterator[bool]:
    """Try lock `key` for the session (no transaction stays open while it is held); yields
    whether it was taken. Elsewhere than PostgreSQL, always taken (one machine)."""
    if not postgres():
        yield True
        return
    lock = pglock.advisory(key, timeout=0)
    got = bool(lock.acquire())
    try:
        yield got
    finally:
        if got:
            lock.release()


@contextlib.contextmanager
def session_locks(keys: Sequence[int], *, wait: bool = False,
                  wait_s: float | None = None) -> Iterator[list[int]]:
    """Session locks on several keys; yields the keys held.

    All are tried in one round trip (a dispatch pass takes up to 64 of them, so one statement
    each would cost a round trip each); with `wait`, the missing ones are then waited for one
    at a time in key order (so two waiters never deadlock), each for at most `wait_s` seconds
    when given (a key still busy then is left out). Elsewhere than PostgreSQL all are held.
    """
    if not postgres() or not keys:
        yield list(keys)
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("pg_try_advisory_lock(%s)" for _ in keys),
                       list(keys))
        held = [k for k, ok in zip(keys, cursor.fetchone(), strict=True) if ok]
        if wait:
            for k in sorted(set(keys) - set(held)):
                if _lock_wait(cursor, k, wait_s):
                    held.append(k)
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT " + ", ".join("pg_advisory_unlock(%s)" for _ in held),
                               held)


def _lock_wait(cursor: Any, key: int, wait_s: float | None) -> bool:
    """Wait for one session advisory lock (at most `wait_s` seconds when given)."""
    if wait_s is None:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
        return True
    if connection.in_atomic_block:
        # A timed-out statement would abort the caller's transaction: try once instead.
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        return bool(cursor.fetchone()[0])
    cursor.execute(f"SET lock_timeout = '{max(1, int(wait_s * 1000))}ms'")
    try:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
        return True
    except OperationalError:
        return False
    finally:
        cursor.execute("RESET lock_timeout")


def skip_locked(queryset: Any) -> Any:
    """`queryset` locked for the caller's transaction, leaving out rows another transaction
    holds (several workers each take different rows, none waits): SELECT ... FOR UPDATE SKIP
    LOCKED on PostgreSQL. SQLite locks no rows (one writer at a time, one worker under
    `make run`): the rows as they are, so callers must be safe to repeat."""
    if postgres():
        return queryset.select_for_update(skip_locked=True)
    return queryset


def any_of(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """`column` is one of `values`, as SQL and its parameters: one array parameter on
    PostgreSQL (one statement text whatever the count, so it is prepared once), an IN list
    elsewhere. `values` must not be empty."""
    if postgres():
        return f"{column} = ANY(%s)", [list(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)


# --- bulk writes -----------------------------------------------------------------------------


def bulk_set(model: Any, objs: Sequence[Any], fields: list[str]) -> None:
    """Write `fields` of many rows by primary key.

    Django's bulk_update builds one CASE WHEN per field and row, which costs seconds for a few
    thousand rows; on PostgreSQL a prepared UPDATE sent with executemany (pipelined by
    psycopg 3) costs milliseconds. Other databases use bulk_update.
    """
    if not objs:
        return
    if not postgres():
        model.objects.bulk_update(objs, fields, batch_size=500)
        return
    cols = [model._meta.get_field(f) for f in fields]
    sql = (f'UPDATE "{model._meta.db_table}" SET '
           + ", ".join(f'"{c.column}" = %s' for c in cols) + ' WHERE "id" = %s')
    params = [[c.get_db_prep_save(getattr(o, c.attname), connection) for c in cols] + [o.pk]
              for o in objs]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def bulk_add(model: Any, ids: Sequence[int], increments: dict[str, Sequence[int]]) -> None:
    """Add `increments[field][i]` to `field` of row `ids[i]` (integer counters, many rows).

    On PostgreSQL one UPDATE joined to the arrays unnested; elsewhere one UPDATE per row.
    """
    if not ids:
        return
    if not postgres():
        for n, pk in enumerate(ids):
            model.objects.filter(pk=pk).update(
                **{name: F(name) + values[n] for name, values in increments.items()})
        return
    qn = connection.ops.quote_name
    pk_column = qn(model._meta.pk.column)
    columns = [qn(model._meta.get_field(name).column) for name in increments]
    sql = (f"UPDATE {qn(model._meta.db_table)} t SET "
           + ", ".join(f"{c} = t.{c} + d.{c}" for c in columns)
           + " FROM unnest(" + ", ".join(["%s::bigint[]"] * (len(columns) + 1)) + ") AS d("
           + ", ".join([pk_column, *columns]) + f") WHERE t.{pk_column} = d.{pk_column}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(ids), *(list(v) for v in increments.values())])


def upsert_add(model: Any, keys: Sequence[str], value: str,
               rows: Sequence[tuple[Any, ...]]) -> None:
    """Add each row's last item to `value` of the row its other items (the `keys` columns, a
    unique constraint) name, inserting the rows not there yet: one INSERT ... ON CONFLICT DO
    UPDATE, which PostgreSQL and SQLite (3.24 on) both run, and which never loses an addition
    made at the same time by another process (Django's bulk_create with update_conflicts can
    only overwrite)."""
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    key_cols = [qn(model._meta.get_field(k).column) for k in keys]
    value_col = qn(model._meta.get_field(value).column)
    cols = ", ".join([*key_cols, value_col])
    one = "(" + ", ".join(["%s"] * (len(keys) + 1)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), 200):  # SQLite's limit on parameters per statement
            batch = rows[start:start + 200]
            cursor.execute(
                f"INSERT INTO {table} ({cols}) VALUES {', '.join([one] * len(batch))} "
                f"ON CONFLICT ({', '.join(key_cols)}) DO UPDATE SET "
                f"{value_col} = {table}.{value_col} + excluded.{value_col}",
                [item for row in batch for item in row])


def insert_rows(model: Any, objs: Sequence[Any]) -> None:
    """Insert unsaved model instances (no ids come back).

    bulk_create builds one INSERT with a parameter per field and row, which Django compiles
    and psycopg quotes client-side: milliseconds per hundred rows. On PostgreSQL the rows go
    through COPY instead; other databases use bulk_create.
    """
    if not objs:
        return
    if not postgres():
        model.objects.bulk_create(objs, batch_size=1000)
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    with connection.cursor() as cursor, cursor.cursor.copy(
            f'COPY "{model._meta.db_table}" ({columns}) FROM STDIN') as copy:
        for o in objs:
            copy.write_row([f.get_db_prep_save(getattr(o, f.attname), connection)
                            for f in fields])


# --- prepared statements -------------------------------------------------------------------

_PreparingCursor: Any = None


def _fixed_query_class() -> Any:
    """psycopg's query class, but keeping the conversion of every statement it sees (`%s`
    placeholders to `$n`, split and encoded): psycopg keeps it only for statements under 4 KB,
    and the submission's insert (one statement for the workload, its pod sets, its events and
    its queue position) is longer, so it was split again on every request (a millisecond of
    the request's CPU). Hot statements are a few fixed texts, so the cache stays small.
    Falls back to psycopg's own class if its internals differ (the test of hot_cursor says
    so)."""
    try:
        from psycopg import _queries
        from psycopg.sql import Template
    except ImportError:  # psycopg 2, or another layout
        return None
    base = _queries.PostgresQuery
    convert_nocache = getattr(_queries, "_query2pg_nocache", None)
    if convert_nocache is None:
        return base
    convert = functools.lru_cache(maxsize=64)(convert_nocache)

    class FixedQuery(base):  # type: ignore[misc, valid-type]
        def convert(self, query: Any, vars: Any) -> None:
            if vars is None or isinstance(query, Template):
                super().convert(query, vars)
                return
            query = self._ensure_bytes(query)
            self.query, self._want_formats, self._order, self._parts = convert(
                query, self._tx.encoding)
            self.dump(vars)

    FixedQuery.cache = convert  # for the test
    return FixedQuery


def hot_cursor() -> Any:
    """A cursor for the fixed plain-SQL statements of hot paths (submission, queue position).

    On PostgreSQL with psycopg 3 it binds parameters on the server and prepares each
    statement once per connection, so the server stops parsing and planning it on every
    request (which cost more than running these small queries). Queries are logged and errors
    wrapped as on any Django cursor; elsewhere it is a plain `connection.cursor()`.
    """
    global _PreparingCursor
    db = connections[DEFAULT_DB_ALIAS]  # the proxy `connection` costs a lookup per use
    if db.vendor != "postgresql":
        return db.cursor()
    if _PreparingCursor is None:
        try:
            from django.db.backends.postgresql.base import ServerBindingCursor
        except ImportError:  # psycopg 2
            return db.cursor()

        class Preparing(ServerBindingCursor):  # type: ignore[misc, valid-type]
            _query_cls = _fixed_query_class() or ServerBindingCursor._query_cls  # type: ignore[attr-defined]

            # Prepared at the first run, not the fifth (psycopg keeps the latest 100 per
            # connection; with DATABASES' prepare_threshold unset, psycopg prepares nothing).
            def execute(self, query: Any, params: Any = None, *, prepare: bool | None = True,
                        binary: bool | None = None) -> Any:
                return super().execute(  # type: ignore[misc]
                    query, params, prepare=prepare, binary=binary)

        _PreparingCursor = Preparing
    db.ensure_connection()
    db.validate_thread_sharing()
    cursor = _PreparingCursor(db.connection)
    if db.queries_logged:
        return _LoggedHotCursor(cursor, db)
    return db.make_cursor(cursor)


class _LoggedHotCursor(CursorDebugWrapper):
    """Django's debug cursor, but a prepared statement is logged with its text (Django reads
    the text back from psycopg, which has none for a prepared execution)."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        try:
            return super().execute(sql, params)  # type: ignore[misc]
        finally:
            log = self.db.queries_log
            if log and log[-1]["sql"] is None:
                log[-1]["sql"] = sql


# --- array parameters ------------------------------------------------------------------------


def in_array(values: Sequence[Any], sql_type: str) -> Any:
    """`values` for an `__in` lookup: on PostgreSQL one array parameter of `sql_type` (unnested
    by the server), not a placeholder per value (thousands of them cost the driver more than
    the query); elsewhere the values themselves."""
    if postgres():
        return RawSQL(f"SELECT unnest(%s::{sql_type}[])", [list(values)])
    return values
