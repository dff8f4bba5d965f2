"""Metering arithmetic: admission intervals cut into hours and phases, telemetry per minute.

Pure Python (no ORM), so the exact Decimal rules are testable on their own. Time is always an
argument. A minute of telemetry is represented by the Prometheus step at its end: the step at
`t` carries `avg_over_time(...[60s])`, i.e. the minute [t - 60 s, t).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from billing.models import round_quantity

HOUR = timedelta(hours=1)
MINUTE_S = 60
_US_PER_HOUR = Decimal(3_600_000_000)


def hour_floor(moment: datetime) -> datetime:
    """The start of the hour holding `moment`."""
    return moment.replace(minute=0, second=0, microsecond=0)


def exact_hours(delta: timedelta) -> Decimal:
    """A duration in hours, exactly (microsecond resolution, no float)."""
    return Decimal(delta // timedelta(microseconds=1)) / _US_PER_HOUR


def overlap(a_start: datetime, a_end: datetime, b_start: datetime, b_end: datetime) -> timedelta:
    """Length of the intersection of two half-open intervals (zero if disjoint)."""
    start = max(a_start, b_start)
    end = min(a_end, b_end)
    return end - start if end > start else timedelta(0)


@dataclass(frozen=True)
class AdmissionSpan:
    """An admission interval as metering needs it (totals over all pods)."""

    admission_id: int
    workload_id: int
    workload_name: str
    cluster: str
    flavor: str
    queue: str
    team_id: int | None
    gpus: Decimal
    cpu: Decimal
    memory_gib: Decimal
    reserved_at: datetime
    running_at: datetime | None
    ended_at: datetime | None
    # MIG slices (extended resources with a GPU-equivalent) as cards, over all pods: billed as
    # GPU-hours at the flavor's GPU rate.
    gpu_equivalents: Decimal = Decimal(0)
    # What billing prices apart where a rate says so: the part of `gpus` held as fractions of
    # a card, and the MIG slices per profile as (instances, cards).
    fraction_gpus: Decimal = Decimal(0)
    slices: Mapping[str, tuple[Decimal, Decimal]] = field(default_factory=dict)


@dataclass(frozen=True)
class Segment:
    """A phase of an admission inside one hour."""

    phase: str  # "frozen" | "running"
    start: datetime
    end: datetime

    @property
    def hours(self) -> Decimal:
        return exact_hours(self.end - self.start)


def phase_segments(span: AdmissionSpan, hour: datetime, now: datetime) -> list[Segment]:
    """Frozen and running parts of an admission inside [hour, hour + 1 h), clipped at `now`.

    Frozen time runs from the reservation until the pods run (or until the admission ended if
    they never ran); running time from then until the end (or `now` while still running).
    """
    hour_end = min(hour + HOUR, now)
    end = span.ended_at or now
    frozen_end = span.running_at or end
    frozen_end = min(frozen_end, end)
    out: list[Segment] = []
    for phase, start, stop in (
        ("frozen", span.reserved_at, frozen_end),
        ("running", span.running_at, end),
    ):
        if start is None:
            continue
        s, e = max(start, hour), min(stop, hour_end)
        if e > s:
            out.append(Segment(phase, s, e))
    return out


@dataclass(frozen=True)
class SegmentQuantities:
    """Reserved quantities of a segment, rounded to 4 places."""

    gpu_hours: Decimal
    core_hours: Decimal
    memory_gib_hours: Decimal


def segment_quantities(span: AdmissionSpan, segment: Segment) -> SegmentQuantities:
    """GPU-hours, core-hours and memory GiB-hours a segment reserved."""
    hours = segment.hours
    return SegmentQuantities(
        gpu_hours=round_quantity((span.gpus + span.gpu_equivalents) * hours),
        core_hours=round_quantity(Decimal(span.cpu) * hours),
        memory_gib_hours=round_quantity(Decimal(span.memory_gib) * hours),
    )


@dataclass
class WorkloadTelemetry:
    """One workload's telemetry for an hour: values per minute-end step (epoch seconds)."""

    active: dict[int, Decimal] = field(default_factory=dict)
    fb_mib: dict[int, Decimal] = field(default_factory=dict)
    source: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class TelemetryResult:
    """What telemetry says about a running segment."""

    active_gpu_hours: Decimal | None
    gap_gpu_hours: Decimal
    gpu_memory_gib_hours: Decimal | None
    expected_minutes: int
    telemetry_minutes: int
    gap_minutes: int
    used_steps: frozenset[int]


def minute_steps(start: datetime, end: datetime) -> list[tuple[int, datetime, datetime]]:
    """The minute-end steps whose minute overlaps [start, end), with each minute's bounds."""
    first = start.replace(second=0, microsecond=0)
    out = []
    minute = first
    while minute < end:
        nxt = minute + timedelta(seconds=MINUTE_S)
        out.append((int(nxt.timestamp()), minute, nxt))
        minute = nxt
    return out


def meter_running(
    span: AdmissionSpan, segment: Segment, telemetry: WorkloadTelemetry | None
) -> TelemetryResult:
    """Active GPU-hours and gaps of a running segment from per-minute telemetry.

    Each covered minute contributes min(active GPUs, reserved GPUs) x its overlap with the
    segment; an uncovered minute is a gap: its reserved GPU-hours are reported as
    `gap_gpu_hours`, never as zero activity.
    """
    active_total = Decimal(0)
    gap_total = Decimal(0)
    fb_total = Decimal(0)
    covered = 0
    gaps = 0
    used: set[int] = set()
    steps = minute_steps(segment.start, segment.end)
    gpus = Decimal(span.gpus) + span.gpu_equivalents
    for step, m_start, m_end in steps:
        hours = exact_hours(overlap(m_start, m_end, segment.start, segment.end))
        value = telemetry.active.get(step) if telemetry is not None else None
        if value is None:
            gaps += 1
            gap_total += gpus * hours
            continue
        covered += 1
        used.add(step)
        active_total += min(value, gpus) * hours
        if telemetry is not None and step in telemetry.fb_mib:
            fb_total += telemetry.fb_mib[step] / Decimal(1024) * hours
    return TelemetryResult(
        active_gpu_hours=round_quantity(active_total) if covered else None,
        gap_gpu_hours=round_quantity(gap_total),
        gpu_memory_gib_hours=round_quantity(fb_total) if covered else None,
        expected_minutes=len(steps),
        telemetry_minutes=covered,
        gap_minutes=gaps,
        used_steps=frozenset(used),
    )


def orphan_minutes(
    telemetry: Mapping[int, WorkloadTelemetry], used: Mapping[int, set[int]]
) -> dict[int, tuple[int, Decimal, str]]:
    """Per workload: telemetry minutes no admission accounted for, and their active GPU-hours."""
    out: dict[int, tuple[int, Decimal, str]] = {}
    for workload_id, tel in telemetry.items():
        seen = used.get(workload_id, set())
        extra = [step for step in tel.active if step not in seen]
        if extra:
            active = sum((tel.active[s] for s in extra), Decimal(0)) / Decimal(60)
            out[workload_id] = (len(extra), round_quantity(active), tel.namespace)
    return out
