"""Daily reconciliation: admissions (what was billed) against telemetry (what ran)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from billing.models import (
    FindingKind,
    OrphanTelemetry,
    Phase,
    ReconciliationFinding,
    ReconciliationRun,
    UsageRecord,
)


@transaction.atomic
def reconciliation_run(*, day: date, now: datetime | None = None) -> ReconciliationRun:
    """Compare a UTC day's usage records with telemetry; re-running replaces that day's findings.

    Flags workloads billed without any telemetry, telemetry without an admission, and gaps
    (running minutes with no samples), one finding per workload and kind with totals.
    """
    now = now or timezone.now()
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    run, _ = ReconciliationRun.objects.update_or_create(day=day, defaults={"ran_at": now})
    run.findings.all().delete()
    records = UsageRecord.objects.filter(hour__gte=start, hour__lt=end, phase=Phase.RUNNING)
    groups: dict[tuple[str, int], dict] = defaultdict(
        lambda: {"minutes": 0, "gpu_hours": Decimal(0), "hour": None, "name": "", "queue": ""}
    )
    count = 0
    for r in records.filter(gpus__gt=0).iterator():
        count += 1
        if r.gap_minutes == 0:
            continue
        kind: str = (
            FindingKind.BILLED_WITHOUT_TELEMETRY if r.telemetry_minutes == 0 else FindingKind.GAP
        )
        g = groups[(kind, r.workload_id)]
        g["minutes"] += r.gap_minutes
        g["gpu_hours"] += r.gap_gpu_hours
        g["hour"] = g["hour"] or r.hour
        g["name"], g["queue"] = r.workload_name, r.queue
    findings = []
    for (kind, workload_id), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        what = (
            "billed with no telemetry at all"
            if kind == FindingKind.BILLED_WITHOUT_TELEMETRY else "telemetry gaps"
        )
        findings.append(ReconciliationFinding(
            run=run, kind=kind, workload_id=workload_id, workload_name=g["name"],
            queue=g["queue"], hour=g["hour"], minutes=g["minutes"], gpu_hours=g["gpu_hours"],
            message=f"workload {workload_id} ({g['name']}, {g['queue']}): {what}: "
            f"{g['minutes']} running minutes without samples, {g['gpu_hours']} reserved "
            "GPU-hours billed unmetered",
        ))
    orphans: dict[int, dict] = defaultdict(
        lambda: {"minutes": 0, "gpu_hours": Decimal(0), "hour": None, "ns": ""}
    )
    for o in OrphanTelemetry.objects.filter(hour__gte=start, hour__lt=end):
        g = orphans[o.workload_id]
        g["minutes"] += o.minutes
        g["gpu_hours"] += o.active_gpu_hours
        g["hour"] = g["hour"] or o.hour
        g["ns"] = o.namespace
    for workload_id, g in sorted(orphans.items()):
        findings.append(ReconciliationFinding(
            run=run, kind=FindingKind.TELEMETRY_WITHOUT_ADMISSION, workload_id=workload_id,
            queue=g["ns"], hour=g["hour"], minutes=g["minutes"], gpu_hours=g["gpu_hours"],
            message=f"workload {workload_id} (namespace {g['ns'] or '?'}): {g['minutes']} "
            f"minutes of GPU telemetry ({g['gpu_hours']} active GPU-hours) with no admission",
        ))
    ReconciliationFinding.objects.bulk_create(findings)
    run.records = count
    run.findings_count = len(findings)
    run.save(update_fields=["records", "findings_count"])
    return run
