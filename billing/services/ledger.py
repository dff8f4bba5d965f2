"""The append-only ledger: SHA-256 chained entries, verification, corrections."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from billing.models import LedgerEntry, LedgerHead
from core import db

GENESIS = "0" * 64
_SEP = "\x1f"

# The order in which fields enter the hash; verification reads them in the same order.
HASH_FIELDS = (
    "seq", "created_at", "hour", "cost_center_id", "team_id", "team_name", "queue",
    "workload_id", "workload_name", "flavor", "kind", "basis", "quantity", "unit",
    "rate_card_id", "rate_version", "rate", "amount", "currency", "usage_record_id",
    "corrects_id", "note", "prev_hash",
)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _text(value: object) -> str:
    # The same text PostgreSQL gives in VERIFY_SQL: times as epoch microseconds, numerics at
    # their column's scale, NULL as empty.
    if value is None:
        return ""
    if isinstance(value, datetime):
        return str((value - _EPOCH) // _US)
    if isinstance(value, Decimal):
        # -0.00 and 0.00 are the same amount; the database gives back the unsigned form.
        return format(abs(value) if value == 0 else value, "f")
    return str(value)


def entry_hash(values: Sequence[object]) -> str:
    """SHA-256 of an entry's fields in HASH_FIELDS order (prev_hash last)."""
    text = _SEP.join(_text(v) for v in values)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class EntryDraft:
    """A charge to append: everything but seq, timestamps and hashes."""

    hour: datetime
    cost_center_id: int
    team_id: int | None
    team_name: str
    queue: str
    workload_id: int | None
    workload_name: str
    flavor: str
    kind: str
    basis: str
    quantity: Decimal
    unit: str
    rate_card_id: int
    rate_version: int
    rate: Decimal
    amount: Decimal
    currency: str
    usage_record_id: int | None = None
    corrects_id: int | None = None
    note: str = ""


def ledger_lock() -> LedgerHead:
    """Lock the ledger head row for the rest of the transaction (billing writes serialise)."""
    head = LedgerHead.objects.select_for_update().filter(pk=1).first()
    if head is None:
        LedgerHead.objects.get_or_create(pk=1)
        head = LedgerHead.objects.select_for_update().get(pk=1)
    return head


@transaction.atomic
def ledger_append(
    *, drafts: Iterable[EntryDraft], now: datetime | None = None
) -> list[LedgerEntry]:
    """Append entries at the tip of the chain (the head row is locked, so appends serialise)."""
    drafts = list(drafts)
    if not drafts:
        return []
    now = now or timezone.now()
    head = ledger_lock()
    seq, prev = head.last_seq, head.last_hash
    entries = []
    for d in drafts:
        seq += 1
        entry = LedgerEntry(
            seq=seq, created_at=now, hour=d.hour, cost_center_id=d.cost_center_id,
            team_id=d.team_id, team_name=d.team_name, queue=d.queue,
            workload_id=d.workload_id, workload_name=d.workload_name, flavor=d.flavor,
            kind=d.kind, basis=d.basis, quantity=d.quantity.quantize(Decimal("0.0001")),
            unit=d.unit, rate_card_id=d.rate_card_id, rate_version=d.rate_version,
            rate=d.rate.quantize(Decimal("0.0001")), amount=d.amount.quantize(Decimal("0.01")),
            currency=d.currency, usage_record_id=d.usage_record_id, corrects_id=d.corrects_id,
            note=d.note, prev_hash=prev,
        )
        entry.hash = entry_hash([getattr(entry, f) for f in HASH_FIELDS])
        prev = entry.hash
        entries.append(entry)
    LedgerEntry.objects.bulk_create(entries, batch_size=2000)
    head.last_seq, head.last_hash = seq, prev
    head.save(update_fields=["last_seq", "last_hash"])
    return entries


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of recomputing the chain."""

    checked: int
    ok: bool
    first_bad_seq: int | None = None
    problem: str = ""


def _sql_text(field: str) -> str:
    if field in ("created_at", "hour"):
        return f"(extract(epoch from {field}) * 1000000)::bigint::text"
    return f"coalesce({field}::text, '')"


# Recomputes every entry's SHA-256 and link inside PostgreSQL and returns the first bad entry.
VERIFY_SQL = f"""
WITH chain AS (
  SELECT seq, prev_hash, hash,
    lag(seq) OVER (ORDER BY seq) AS before_seq,
    lag(hash) OVER (ORDER BY seq) AS before_hash,
    encode(sha256(convert_to(concat_ws(chr(31), {", ".join(_sql_text(f) for f in HASH_FIELDS)}),
      'UTF8')), 'hex') AS digest
  FROM billing_ledgerentry
)
SELECT seq, prev_hash, hash, before_seq, before_hash, digest, (SELECT count(*) FROM chain)
FROM chain
WHERE seq <> coalesce(before_seq, 0) + 1
   OR prev_hash <> coalesce(before_hash, '{GENESIS}')
   OR hash <> digest
ORDER BY seq
LIMIT 1
"""


def ledger_verify(*, chunk_size: int = 20000, method: str = "auto") -> VerifyResult:
    """Recompute every hash in order; name the first entry whose content or link is wrong.

    On PostgreSQL the hashes are recomputed by the database (`method="sql"`, one pass);
    elsewhere, or with `method="python"`, entry by entry here. Both read the same canonical
    text, so they agree.
    """
    if method == "sql" or (method == "auto" and db.postgres()):
        return _verify_sql()
    return _verify_python(chunk_size)


def _verify_sql() -> VerifyResult:
    with connection.cursor() as cur:
        cur.execute(VERIFY_SQL)
        row = cur.fetchone()
        if row is None:
            cur.execute("SELECT count(*), max(seq) FROM billing_ledgerentry")
            count, _ = cur.fetchone()
            cur.execute("SELECT hash FROM billing_ledgerentry ORDER BY seq DESC LIMIT 1")
            last = cur.fetchone()
            return _check_head(count, last[0] if last else GENESIS)
    seq, prev_hash, stored, before_seq, before_hash, digest, _ = row
    checked = LedgerEntry.objects.filter(seq__lt=seq).count()
    expected_seq = (before_seq or 0) + 1
    if seq != expected_seq:
        return VerifyResult(
            checked, False, seq,
            f"entry #{seq} follows #{expected_seq - 1}: entries #{expected_seq}.."
            f"#{seq - 1} are missing",
        )
    if prev_hash != (before_hash or GENESIS):
        return VerifyResult(
            checked, False, seq,
            f"entry #{seq}: its link to the previous entry ({prev_hash[:12]}…) does not "
            f"match the previous entry's hash ({(before_hash or GENESIS)[:12]}…)",
        )
    return VerifyResult(
        checked, False, seq,
        f"entry #{seq}: content does not match its hash (stored {stored[:12]}…, "
        f"recomputed {digest[:12]}…): the entry was altered",
    )


def _check_head(checked: int, last_hash: str) -> VerifyResult:
    head = LedgerHead.objects.filter(pk=1).first()
    if head is not None and (head.last_seq != checked or head.last_hash != last_hash):
        return VerifyResult(
            checked, False, checked + 1 if head.last_seq > checked else head.last_seq,
            f"the chain ends at #{checked} but the head records #{head.last_seq}: "
            "entries were removed from the end",
        )
    return VerifyResult(checked, True)


def _verify_python(chunk_size: int) -> VerifyResult:
    prev = GENESIS
    expected_seq = 1
    checked = 0
    fields = [*HASH_FIELDS[:-1], "prev_hash", "hash"]
    rows = LedgerEntry.objects.order_by("seq").values_list(*fields).iterator(chunk_size)
    for row in rows:
        seq = row[0]
        if seq != expected_seq:
            return VerifyResult(
                checked, False, seq,
                f"entry #{seq} follows #{expected_seq - 1}: entries #{expected_seq}.."
                f"#{seq - 1} are missing",
            )
        if row[-2] != prev:
            return VerifyResult(
                checked, False, seq,
                f"entry #{seq}: its link to the previous entry ({row[-2][:12]}…) does not "
                f"match the previous entry's hash ({prev[:12]}…)",
            )
        digest = entry_hash(row[:-1])
        if digest != row[-1]:
            return VerifyResult(
                checked, False, seq,
                f"entry #{seq}: content does not match its hash (stored {row[-1][:12]}…, "
                f"recomputed {digest[:12]}…): the entry was altered",
            )
        prev = row[-1]
        expected_seq += 1
        checked += 1
    return _check_head(checked, prev)
