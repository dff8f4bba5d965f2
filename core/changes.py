"""Per-process caches of what policies and token authentication read, kept exact by the
database's change log.

Migration 0002 (policies) puts statement-level triggers on every table the policies and their
context read; each writing transaction appends (topic, its transaction id) to
`policies_change`, once per topic: an insert, so writers never wait for each other. Topics:

- `policy`: the policies themselves (not their hit counters);
- `config`: queues, quota entries, teams, their members and queue grants, approvals, flavors,
  priority classes, clusters, nodes, cost centers;
- `usage`: open admissions (and a workload moving queue);
- `budget`: budgets, their thresholds and firings (migration 0005);
- `auth`: API tokens and users, the columns a token lookup carries (portal migration 0003).

`validate()` runs one small prepared query (a function, so it is not planned again each
time): the current snapshot, the topics written by a
transaction that the snapshot of the last check did not see (committed since, in any process),
and the topics the current transaction wrote itself. The cached parts of those topics are
dropped, and the check's snapshot becomes the new reference: a change takes effect on the next
read as soon as it commits, in every process; a rolled-back change leaves no row; what a
transaction reads after writing a topic itself is used but never cached (it may roll back).

Caches are per thread (no locking, nothing shared between threads) and per database. Off
PostgreSQL (or before the migration), `validate()` returns None and callers read every time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connection
from django.db.utils import DatabaseError

from core.db import postgres

logger = logging.getLogger(__name__)

TOPICS = ("policy", "config", "usage", "budget", "auth")

# Rows older than this are pruned; a cache not revalidated for half of it starts afresh, so a
# pruned row can never be one a cache still needed.
KEEP_S = 600.0
MAX_IDLE_S = KEEP_S / 2

# migration 0002: the current snapshot, the topics written since `since`, and by this transaction
CHECK_SQL = "SELECT * FROM policies_changes_since(%s::pg_snapshot)"
# Before the first check nothing is cached: any snapshot will do.
_ORIGIN = "1:1:"

T = TypeVar("T")


@dataclass
class Store:
    """The cached parts of one database for one thread, by topic."""

    snapshot: str = _ORIGIN
    checked_at: float = 0.0
    parts: dict[str, dict[Any, Any]] = field(default_factory=lambda: {t: {} for t in TOPICS})
    # Derived values that depend on several topics: key -> (topics, value).
    derived: dict[Any, tuple[frozenset[str], Any]] = field(default_factory=dict)
    available: bool = True

    def drop(self, topics: set[str]) -> None:
        for topic in topics:
            self.parts[topic] = {}
        if topics:
            self.derived = {k: v for k, v in self.derived.items() if not (v[0] & topics)}


@dataclass
class View:
    """What one check found: the store, and the topics this transaction wrote (not cacheable)."""

    store: Store
    own: frozenset[str]
    changed: frozenset[str]

    def get(self, topic: str, key: Any, load: Callable[[], T]) -> T:
        """The cached value of `key` in `topic`, else `load()` (cached unless own-written)."""
        if topic in self.own:
            return load()
        part = self.store.parts[topic]
        if key in part:
            return part[key]  # type: ignore[no-any-return]
        value = load()
        part[key] = value
        return value

    def has(self, topic: str, key: Any) -> bool:
        return topic not in self.own and key in self.store.parts[topic]

    def put(self, topic: str, key: Any, value: Any) -> None:
        if topic not in self.own:
            self.store.parts[topic][key] = value

    def derive(self, key: Any, topics: frozenset[str], load: Callable[[], T]) -> T:
        """A value computed from several topics, cached until one of them changes."""
        if topics & self.own:
            return load()
        hit = self.store.derived.get(key)
        if hit is not None:
            return hit[1]  # type: ignore[no-any-return]
        value = load()
        self.store.derived[key] = (topics, value)
        return value


_local = threading.local()


def _stores() -> dict[str, Store]:
    stores = getattr(_local, "stores", None)
    if stores is None:
        stores = _local.stores = {}
    return stores


def fetch_prepared(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Run `sql` as a prepared statement (planned once per connection) on Django's
    connection, in its current transaction; PostgreSQL (psycopg 3) only.

    The change log's check is the first query of most requests. Outside a transaction it
    serves as the kept connection's health check (CONN_HEALTH_CHECKS): a connection the server
    dropped (a restart, a failover) fails it, and is replaced and the check run again on a new
    one, as Django's own check (`SELECT 1`, one more round trip per request) would have done
    before it. Inside a transaction the connection is checked first as usual."""
    import psycopg  # noqa: PLC0415

    db: Any = connection  # the health check's attributes are not in django-stubs
    stands_for_check = (not db.in_atomic_block and db.connection is not None
                        and db.health_check_enabled and not db.health_check_done)
    if not stands_for_check:
        connection.close_if_health_check_failed()
    connection.ensure_connection()
    start = time.perf_counter()
    # Errors wrapped as on Django's cursors: a connection lost here (and not replaced below)
    # is Django's OperationalError, an outage (503), not psycopg's, which nothing above
    # recognises. Django's own errors (from ensure_connection) pass through unchanged.
    with connection.wrap_database_errors:
        try:
            rows = _fetch(psycopg, sql, params)
        except psycopg.OperationalError:
            if not stands_for_check:
                raise
            logger.info("a kept database connection was dropped by the server: replaced")
            connection.close()
            connection.ensure_connection()
            rows = _fetch(psycopg, sql, params)
    if stands_for_check:
        db.health_check_done = True
    if connection.queries_logged:  # visible to query counts in tests and the debug toolbar
        connection.queries_log.append({"sql": f"{sql} -- {params}",
                                       "time": f"{time.perf_counter() - start:.3f}"})
    return rows


def _fetch(psycopg: Any, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        return [tuple(row) for row in cursor.fetchall()]


def _execute(sql: str, params: list[Any]) -> tuple[Any, ...]:
    return fetch_prepared(sql, params)[0]


def validate() -> View | None:
    """Check this thread's caches against the change log (one query); None off PostgreSQL.

    Inside `pinned()`, the view the block started with (no query).
    """
    if not postgres():
        return None
    pinned_view = getattr(_local, "pinned", None)
    if pinned_view is not None:
        return pinned_view  # type: ignore[no-any-return]
    key = str(connection.settings_dict.get("NAME"))
    store = _stores().get(key)
    if store is None:
        store = _stores()[key] = Store()
    if not store.available:
        return None
    now = time.monotonic()
    if now - store.checked_at > MAX_IDLE_S:
        store.drop(set(TOPICS))
        store.snapshot = _ORIGIN
    if store.checked_at == 0.0:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT to_regprocedure('policies_changes_since(pg_snapshot)') IS NOT NULL")
            store.available = bool(cursor.fetchone()[0])
        if not store.available:
            logger.warning("policies_change is missing (migration policies 0002 not applied): "
                           "policies read their context every time")
            return None
    snapshot, changed, own = _execute(CHECK_SQL, [store.snapshot])
    dropped = set(changed) | set(own)
    if store.snapshot == _ORIGIN:
        dropped = set(TOPICS)
    store.drop(dropped)
    store.snapshot, store.checked_at = snapshot, now
    return View(store, frozenset(own), frozenset(dropped))


@contextmanager
def pinned() -> Iterator[View | None]:
    """One check for a whole block: `validate()` inside it returns the view the block started
    with. For a block that only reads (a submission's lookups and checks before its insert):
    what the block itself writes would not be seen as its own."""
    if getattr(_local, "pinned", None) is not None:  # nested: the outer block's view
        yield _local.pinned
        return
    view = validate()
    _local.pinned = view
    try:
        yield view
    finally:
        _local.pinned = None


def reset() -> None:
    """Forget this thread's caches (tests)."""
    _stores().clear()
    _local.pinned = None


# A row is stamped `seen_at` the first time a pruner sees it (necessarily after its commit)
# and deleted KEEP_S after that: never before a cache validated since its commit could need it.
PRUNE_SQL = (
    "WITH seen AS (UPDATE policies_change SET seen_at = clock_timestamp() WHERE id IN ("
    "SELECT id FROM policies_change WHERE seen_at IS NULL ORDER BY id LIMIT 20000 "
    "FOR UPDATE SKIP LOCKED)) "
    "DELETE FROM policies_change WHERE id IN (SELECT id FROM policies_change "
    "WHERE seen_at < clock_timestamp() - make_interval(secs => %s) ORDER BY id LIMIT 20000 "
    "FOR UPDATE SKIP LOCKED)"
)
_last_prune = 0.0


def prune(every_s: float = 60.0) -> int:
    """Delete change rows no cache can need any more (at most once a minute per process;
    rows locked by another pruner are skipped, never waited for)."""
    global _last_prune
    if not postgres():
        return 0
    now = time.monotonic()
    if now - _last_prune < every_s:
        return 0
    _last_prune = now
    try:
        with connection.cursor() as cursor:
            if connection.in_atomic_block:
                cursor.execute("SAVEPOINT policies_prune")
            cursor.execute(PRUNE_SQL, [KEEP_S])
            count = cursor.rowcount
            if connection.in_atomic_block:
                cursor.execute("RELEASE SAVEPOINT policies_prune")
    except DatabaseError:
        if connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.execute("ROLLBACK TO SAVEPOINT policies_prune")
        logger.warning("could not prune policies_change", exc_info=True)
        return 0
    return int(count or 0)
