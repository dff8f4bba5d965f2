"""Hourly metering (admissions + telemetry -> usage records) and pricing (records -> ledger)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from billing.metering import (
    HOUR,
    AdmissionSpan,
    WorkloadTelemetry,
    hour_floor,
    meter_running,
    minute_steps,
    orphan_minutes,
    phase_segments,
    segment_quantities,
)
from billing.models import (
    UNITS,
    CostCenter,
    LedgerEntry,
    OrphanTelemetry,
    RateCard,
    TeamCostCenter,
    UsageRecord,
)
from billing.pricing import RateVersion, UsageInput, price_usage
from billing.prometheus import PrometheusClient, TelemetryUnavailable, default_client, fetch_hour
from billing.services.ledger import EntryDraft, ledger_append, ledger_lock
from core.quantity import amounts, card_equivalent
from scheduling.selectors import pod_owners

logger = logging.getLogger(__name__)

_RECORD_FIELDS = (
    "workload_id", "workload_name", "start", "end", "cluster", "flavor", "queue", "team_id",
    "gpus", "gpu_equivalents", "fraction_gpus", "slices", "cpu", "memory_gib", "gpu_hours",
    "core_hours", "memory_gib_hours",
    "active_gpu_hours", "gap_gpu_hours", "gpu_memory_gib_hours", "expected_minutes",
    "telemetry_minutes", "gap_minutes", "telemetry_source",
)


@dataclass
class RollupResult:
    """What an hour's rollup did."""

    hour: datetime
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    orphans: int = 0


def _check_hour(hour: datetime, now: datetime) -> None:
    if hour.tzinfo is None:
        raise ValidationError(f"hour {hour} must be timezone-aware (UTC)")
    if hour.minute or hour.second or hour.microsecond:
        raise ValidationError(f"hour {hour.isoformat()} must start on the hour")
    if hour + HOUR > now:
        raise ValidationError(
            f"hour {hour.isoformat()} is not over yet (now {now.isoformat()}): "
            "only complete hours are rolled up"
        )


def admission_spans(hour: datetime) -> list[AdmissionSpan]:
    """The admissions that held anything during [hour, hour + 1 h)."""
    from scheduling.models import Admission

    rows = list(
        Admission.objects.filter(reserved_at__lt=hour + HOUR)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=hour))
        .select_related("workload__queue", "cluster", "flavor")
        .order_by("pk")
    )
    shapes = admission_shapes(rows)
    return [
        AdmissionSpan(
            admission_id=a.pk, workload_id=a.workload_id, workload_name=a.workload.name,
            cluster=a.cluster.name, flavor=a.flavor.name, queue=a.workload.queue.path,
            team_id=a.workload.team_id, gpus=a.gpus, cpu=a.cpu, memory_gib=a.memory_gib,
            reserved_at=a.reserved_at, running_at=a.running_at, ended_at=a.ended_at,
            gpu_equivalents=shapes.get(a.pk, NO_SHAPES).slice_cards,
            fraction_gpus=shapes.get(a.pk, NO_SHAPES).fraction_gpus,
            slices=shapes.get(a.pk, NO_SHAPES).slices,
        )
        for a in rows
    ]


@dataclass(frozen=True)
class Shapes:
    """An admission's GPU shapes as billing prices them: the cards its fractions hold, and its
    MIG slices per profile as (instances, cards)."""

    fraction_gpus: Decimal = Decimal(0)
    slices: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)

    @property
    def slice_cards(self) -> Decimal:
        return sum((cards for _, cards in self.slices.values()), Decimal(0))


def admission_shapes(admissions: list[Any]) -> dict[int, Shapes]:
    """Per admission: its fractions of a card and its MIG slices (each worth the flavor's
    `gpu_equivalents`, else N/7 for `mig-Ng.*`), over all pods; admissions holding neither
    are left out."""
    from scheduling.models import PodSet

    by_workload: dict[int, list[tuple[int, Decimal, Any]]] = defaultdict(list)
    for workload_id, count, gpus, resources in PodSet.objects.filter(
        workload_id__in={a.workload_id for a in admissions}
    ).filter(Q(gpus__gt=0, gpus__lt=1) | ~Q(resources={})).values_list(
            "workload_id", "count", "gpus", "resources"):
        by_workload[workload_id].append((count, Decimal(gpus), resources))
    out: dict[int, Shapes] = {}
    for a in admissions:
        fraction = Decimal(0)
        slices: dict[str, tuple[Decimal, Decimal]] = {}
        for count, gpus, resources in by_workload.get(a.workload_id, ()):
            if 0 < gpus < 1:
                fraction += count * gpus
            for name, amount in amounts(resources).items():
                per = card_equivalent(name, a.flavor.gpu_equivalents)
                if per:
                    held, cards = slices.get(name, (Decimal(0), Decimal(0)))
                    slices[name] = (held + count * amount, cards + count * amount * per)
        slices = {name: (held, cards.quantize(EQUIVALENT_PLACES))  # as the record keeps it
                  for name, (held, cards) in slices.items()}
        if fraction or slices:
            out[a.pk] = Shapes(fraction_gpus=fraction, slices=slices)
    return out


def slices_json(slices: Mapping[str, tuple[Decimal, Decimal]]) -> dict[str, list[str]]:
    """A usage record's `slices` column: profile -> [instances, cards] as decimal strings."""
    return {name: [str(held), str(cards)] for name, (held, cards) in sorted(slices.items())}


def slices_of(raw: object) -> dict[str, tuple[Decimal, Decimal]]:
    """A usage record's `slices` column back as decimals."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): (Decimal(v[0]), Decimal(v[1])) for k, v in raw.items()
            if isinstance(v, list | tuple) and len(v) == 2}


EQUIVALENT_PLACES = Decimal("0.000001")
NO_SHAPES = Shapes()


def _same(a: object, b: object) -> bool:
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return a is not None and b is not None and Decimal(a) == Decimal(b)  # type: ignore[arg-type]
    return a == b


@transaction.atomic
def usage_rollup_hour(
    *,
    hour: datetime,
    now: datetime | None = None,
    client: PrometheusClient | None = None,
    telemetry: dict[int, WorkloadTelemetry] | None = None,
) -> RollupResult:
    """Build (or confirm) the usage records of one complete hour; re-running changes nothing.

    Telemetry comes from `client` (default: the configured Prometheus), or is passed in. If
    Prometheus is configured but fails, the error propagates so the task retries rather than
    recording an outage as gaps.
    """
    now = now or timezone.now()
    _check_hour(hour, now)
    # Billing runs one at a time (the ledger head is the lock), so two workers re-running the
    # same hour cannot both create its records or both post its charges.
    ledger_lock()
    result = RollupResult(hour=hour)
    if telemetry is None:
        client = client or default_client()
        telemetry = fetch_hour(client, hour, pod_owners(hour, hour + HOUR)
                               ) if client is not None else {}
    spans = admission_spans(hour)
    existing = {
        (r.admission_id, r.phase): r for r in UsageRecord.objects.filter(hour=hour)
    }
    used: dict[int, set[int]] = defaultdict(set)
    to_create: list[UsageRecord] = []
    for span in spans:
        for segment in phase_segments(span, hour, now):
            quantities = segment_quantities(span, segment)
            values: dict[str, object] = {
                "workload_id": span.workload_id, "workload_name": span.workload_name[:63],
                "start": segment.start, "end": segment.end, "cluster": span.cluster,
                "flavor": span.flavor, "queue": span.queue, "team_id": span.team_id,
                "gpus": span.gpus, "gpu_equivalents": span.gpu_equivalents,
                "fraction_gpus": span.fraction_gpus, "slices": slices_json(span.slices),
                "cpu": span.cpu, "memory_gib": span.memory_gib,
                "gpu_hours": quantities.gpu_hours, "core_hours": quantities.core_hours,
                "memory_gib_hours": quantities.memory_gib_hours,
                "active_gpu_hours": None, "gap_gpu_hours": Decimal("0.0000"),
                "gpu_memory_gib_hours": None, "expected_minutes": 0,
                "telemetry_minutes": 0, "gap_minutes": 0, "telemetry_source": "",
            }
            tel = telemetry.get(span.workload_id)
            if segment.phase == "running" and (span.gpus or span.gpu_equivalents):
                metered = meter_running(span, segment, tel)
                used[span.workload_id] |= metered.used_steps
                values.update(
                    active_gpu_hours=metered.active_gpu_hours,
                    gap_gpu_hours=metered.gap_gpu_hours,
                    gpu_memory_gib_hours=metered.gpu_memory_gib_hours,
                    expected_minutes=metered.expected_minutes,
                    telemetry_minutes=metered.telemetry_minutes,
                    gap_minutes=metered.gap_minutes,
                    telemetry_source=tel.source if tel and metered.telemetry_minutes else "",
                )
            else:
                # Pods starting up may report during the frozen minutes: not an orphan.
                steps = minute_steps(segment.start, segment.end)
                used[span.workload_id] |= {step for step, _, _ in steps}
            record = existing.get((span.admission_id, segment.phase))
            if record is None:
                to_create.append(
                    UsageRecord(
                        hour=hour, admission_id=span.admission_id, phase=segment.phase,
                        computed_at=now, **values,
                    )
                )
                continue
            changed = [k for k in _RECORD_FIELDS if not _same(getattr(record, k), values[k])]
            if not changed:
                result.unchanged += 1
                continue
            for key in changed:
                setattr(record, key, values[key])
            record.computed_at = now
            record.save(update_fields=[*changed, "computed_at"])
            result.updated += 1
    UsageRecord.objects.bulk_create(to_create, batch_size=1000)
    result.created = len(to_create)
    orphans = orphan_minutes(telemetry, used)
    old = {(o.workload_id, o.namespace): o for o in OrphanTelemetry.objects.filter(hour=hour)}
    for workload_id, (minutes, active, namespace) in orphans.items():
        row = old.pop((workload_id, namespace), None)
        if row is None:
            OrphanTelemetry.objects.create(
                hour=hour, workload_id=workload_id, namespace=namespace, minutes=minutes,
                active_gpu_hours=active,
            )
        elif row.minutes != minutes or row.active_gpu_hours != active:
            row.minutes, row.active_gpu_hours = minutes, active
            row.save(update_fields=["minutes", "active_gpu_hours"])
    if old:
        OrphanTelemetry.objects.filter(pk__in=[o.pk for o in old.values()]).delete()
    result.orphans = len(orphans)
    return result


def rate_versions() -> dict[str, dict[str, list[RateVersion]]]:
    """All rate card versions: flavor name -> resource -> versions by effective date."""
    out: dict[str, dict[str, list[RateVersion]]] = defaultdict(lambda: defaultdict(list))
    for card in RateCard.objects.select_related("flavor").order_by("effective_from"):
        out[card.flavor.name][card.resource].append(
            RateVersion(
                id=card.pk, resource=card.resource, version=card.version,
                effective_from=card.effective_from, rate=card.rate,
                frozen_rate=card.effective_frozen_rate, unit=card.unit, currency=card.currency,
            )
        )
    return out


def team_cost_centers() -> tuple[dict[int, CostCenter], CostCenter | None]:
    """Team id -> cost center, and the default cost center (for teams without one)."""
    links = TeamCostCenter.objects.select_related("cost_center")
    mapping = {link.team_id: link.cost_center for link in links}
    return mapping, CostCenter.objects.filter(is_default=True).first()


@dataclass
class PostResult:
    """What pricing an hour appended to the ledger."""

    hour: datetime
    appended: int = 0
    corrections: int = 0
    cost_centers: set[int] = field(default_factory=set)


@transaction.atomic
def charges_post_hour(*, hour: datetime, now: datetime | None = None) -> PostResult:
    """Price an hour's usage records into the ledger; re-running appends nothing.

    Each (record, kind, rate version) is compared with what the ledger already holds for it;
    a difference (a record changed after late telemetry or a late pod start) is posted as a
    negative entry reversing the old charge plus the new charge, never as an edit.
    """
    now = now or timezone.now()
    ledger_lock()  # held until commit: the diff below and the append see the same ledger
    result = PostResult(hour=hour)
    records = list(UsageRecord.objects.filter(hour=hour).select_related("team"))
    if not records:
        return result
    rates = rate_versions()
    mapping, default_cc = team_cost_centers()
    posted: dict[tuple[int, str, int], tuple[Decimal, Decimal, int | None]] = {}
    rows = (
        LedgerEntry.objects.filter(usage_record__in=records)
        .values("usage_record_id", "kind", "rate_card_id")
        .annotate(q=Sum("quantity"), a=Sum("amount"))
    )
    last_ids = {
        (rec, kind, card): pk
        for rec, kind, card, pk in LedgerEntry.objects.filter(
            usage_record__in=records, corrects__isnull=True
        )
        .order_by("seq")
        .values_list("usage_record_id", "kind", "rate_card_id", "pk")
    }
    for row in rows:
        key = (row["usage_record_id"], row["kind"], row["rate_card_id"])
        posted[key] = (row["q"], row["a"], last_ids.get(key))
    drafts: list[EntryDraft] = []
    for record in records:
        cc = mapping.get(record.team_id) if record.team_id else None
        cc = cc or default_cc
        if cc is None:
            logger.warning("usage record %s: team has no cost center and none is default", record)
            continue
        usage = UsageInput(
            phase=record.phase, start=record.start, end=record.end, gpus=record.gpus,
            gpu_equivalents=record.gpu_equivalents, fraction_gpus=record.fraction_gpus,
            slices=slices_of(record.slices), cpu=record.cpu, memory_gib=record.memory_gib,
            active_gpu_hours=record.active_gpu_hours, gap_gpu_hours=record.gap_gpu_hours,
        )
        lines = price_usage(
            usage, rates.get(record.flavor, {}), basis=cc.charge_basis,
            usage_share=cc.usage_share,
        )
        expected = {(record.pk, line.kind, line.rate_card_id): line for line in lines}
        keys = set(expected) | {k for k in posted if k[0] == record.pk}
        for key in sorted(keys, key=lambda k: (k[1], k[2])):
            line = expected.get(key)
            old_q, old_a, last_id = posted.get(key, (Decimal(0), Decimal(0), None))
            if line is not None and line.quantity == old_q and line.amount == old_a:
                continue
            base: dict[str, Any] = {
                "hour": hour, "cost_center_id": cc.pk, "team_id": record.team_id,
                "team_name": record.team.name if record.team else "", "queue": record.queue,
                "workload_id": record.workload_id, "workload_name": record.workload_name,
                "flavor": record.flavor, "basis": cc.charge_basis, "usage_record_id": record.pk,
            }
            if old_q or old_a:
                card = RateCard.objects.get(pk=key[2])
                drafts.append(EntryDraft(
                    **base, kind=key[1], quantity=-old_q, unit=card.unit, rate_card_id=card.pk,
                    rate_version=card.version, rate=card.rate, amount=-old_a,
                    currency=card.currency, corrects_id=last_id,
                    note=f"correction: reverses {old_q} {card.unit} / {old_a} {card.currency} "
                    f"for {record}",
                ))
                result.corrections += 1
            if line is not None:
                if line.currency != cc.currency:
                    raise ValidationError(
                        f"rate card {line.rate_card_id} is in {line.currency} but cost center "
                        f"{cc.code} pays in {cc.currency}"
                    )
                drafts.append(EntryDraft(
                    **base, kind=line.kind, quantity=line.quantity, unit=line.unit,
                    rate_card_id=line.rate_card_id, rate_version=line.rate_version,
                    rate=line.rate, amount=line.amount, currency=line.currency,
                ))
            result.cost_centers.add(cc.pk)
    entries = ledger_append(drafts=drafts, now=now)
    result.appended = len(entries)
    return result


def hours_due(*, now: datetime, lookback: int = 3, catch_up_days: int = 7) -> list[datetime]:
    """The complete hours the hourly task should (re)meter: the last `lookback` hours (late pod
    starts and late telemetry become corrections), and after an outage every hour since the
    last one metered, up to `catch_up_days` back."""
    last = hour_floor(now) - HOUR
    first = last - (lookback - 1) * HOUR
    latest = UsageRecord.objects.order_by("-hour").values_list("hour", flat=True).first()
    if latest is not None and latest + HOUR < first:
        first = max(latest + HOUR, last - timedelta(days=catch_up_days))
    hours = []
    while first <= last:
        hours.append(first)
        first += HOUR
    return hours


def rollup_and_post(
    *, hour: datetime, now: datetime | None = None, client: PrometheusClient | None = None
) -> tuple[RollupResult, PostResult]:
    """Meter then price one hour (each step its own transaction, both idempotent)."""
    rollup = usage_rollup_hour(hour=hour, now=now, client=client)
    posted = charges_post_hour(hour=hour, now=now)
    return rollup, posted


__all__ = [
    "TelemetryUnavailable", "RollupResult", "PostResult", "usage_rollup_hour",
    "charges_post_hour", "rollup_and_post", "rate_versions", "UNITS",
]
