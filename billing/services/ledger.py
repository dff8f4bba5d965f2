"""The append-only ledger: SHA-256 chained entries, verification, corrections."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from billing.models import LedgerEntry, LedgerHead

GENESIS = "0" * 64
_SEP = "\x1f"

# The order in which fields enter the hash; verification reads them in the same order.
HASH_FIELDS = (
    "seq", "created_at", "hour", "cost_center_id", "team_id", "team_name", "queue",
    "workload_id", "workload_name", "flavor", "kind", "basis", "quantity", "unit",
    "rate_card_id", "rate_version", "rate", "amount", "currency", "usage_record_id",
    "corrects_id", "note", "prev_hash",
)


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
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


def _head_locked() -> LedgerHead:
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
    head = _head_locked()
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


def ledger_verify(*, chunk_size: int = 20000) -> VerifyResult:
    """Recompute every hash in order; name the first entry whose content or link is wrong."""
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
    head = LedgerHead.objects.filter(pk=1).first()
    if head is not None and (head.last_seq != checked or head.last_hash != prev):
        return VerifyResult(
            checked, False, checked + 1 if head.last_seq > checked else head.last_seq,
            f"the chain ends at #{checked} but the head records #{head.last_seq}: "
            "entries were removed from the end",
        )
    return VerifyResult(checked, True)
