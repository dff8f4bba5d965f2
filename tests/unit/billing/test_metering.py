"""Exact Decimal metering: phases per hour, GPU/core-hours, telemetry minutes and gaps."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing.metering import (
    AdmissionSpan,
    WorkloadTelemetry,
    meter_running,
    orphan_minutes,
    phase_segments,
    segment_quantities,
)

H = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
LATER = datetime(2026, 3, 3, tzinfo=UTC)


def span(**kw):
    base = dict(
        admission_id=1, workload_id=7, workload_name="w", cluster="bj", flavor="a100",
        queue="rd/vision", team_id=None, gpus=16, cpu=Decimal(0), memory_gib=Decimal(0),
        reserved_at=H, running_at=None, ended_at=None,
    )
    base.update(kw)
    return AdmissionSpan(**base)


def test_sixteen_gpus_frozen_five_minutes_is_1_3333_gpu_hours():
    s = span(reserved_at=H + timedelta(minutes=10), running_at=H + timedelta(minutes=15),
             ended_at=H + timedelta(minutes=45))
    frozen, running = phase_segments(s, H, LATER)
    assert (frozen.phase, running.phase) == ("frozen", "running")
    assert segment_quantities(s, frozen).gpu_hours == Decimal("1.3333")
    assert segment_quantities(s, running).gpu_hours == Decimal("8.0000")


def test_admission_that_never_ran_is_all_frozen_until_it_ended():
    s = span(gpus=8, reserved_at=H + timedelta(minutes=50), ended_at=H + timedelta(minutes=70))
    segs = phase_segments(s, H, LATER)
    assert [(g.phase, g.start, g.end) for g in segs] == [
        ("frozen", H + timedelta(minutes=50), H + timedelta(hours=1))
    ]
    assert segment_quantities(s, segs[0]).gpu_hours == Decimal("1.3333")
    nxt = phase_segments(s, H + timedelta(hours=1), LATER)
    assert segment_quantities(s, nxt[0]).gpu_hours == Decimal("1.3333")


def test_cpu_only_pods_give_core_hours_and_no_gpu_hours():
    s = span(gpus=0, cpu=Decimal("6.5"), memory_gib=Decimal("24"),
             reserved_at=H - timedelta(hours=2), running_at=H - timedelta(hours=2),
             ended_at=H + timedelta(minutes=20))
    (seg,) = phase_segments(s, H, LATER)
    q = segment_quantities(s, seg)
    assert (q.gpu_hours, q.core_hours, q.memory_gib_hours) == (
        Decimal("0.0000"), Decimal("2.1667"), Decimal("8.0000"),
    )


def test_still_running_is_clipped_at_now():
    s = span(gpus=4, reserved_at=H, running_at=H)
    (seg,) = phase_segments(s, H, H + timedelta(minutes=30))
    assert segment_quantities(s, seg).gpu_hours == Decimal("2.0000")


def step(minute):
    return int((H + timedelta(minutes=minute + 1)).timestamp())


def test_telemetry_minutes_active_hours_and_gaps():
    s = span(gpus=8, reserved_at=H, running_at=H, ended_at=H + timedelta(minutes=30))
    (seg,) = phase_segments(s, H, LATER)
    tel = WorkloadTelemetry(source="DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    for m in range(20):  # minutes 0..19 seen at 4 active GPUs; 20..29 missing
        tel.active[step(m)] = Decimal("4")
        tel.fb_mib[step(m)] = Decimal(8 * 1024)
    result = meter_running(s, seg, tel)
    assert result.expected_minutes == 30
    assert result.telemetry_minutes == 20
    assert result.gap_minutes == 10
    assert result.active_gpu_hours == Decimal("1.3333")  # 4 GPUs x 20 min
    assert result.gap_gpu_hours == Decimal("1.3333")  # 8 reserved GPUs x 10 unseen minutes
    assert result.gpu_memory_gib_hours == Decimal("2.6667")  # 8 GiB x 20 min


def test_no_telemetry_is_a_gap_not_zero():
    s = span(gpus=2, reserved_at=H, running_at=H, ended_at=H + timedelta(minutes=6))
    (seg,) = phase_segments(s, H, LATER)
    result = meter_running(s, seg, None)
    assert result.active_gpu_hours is None
    assert result.gap_minutes == 6
    assert result.gap_gpu_hours == Decimal("0.2000")


def test_activity_above_reservation_is_capped_and_unused_minutes_are_orphans():
    s = span(gpus=2, reserved_at=H, running_at=H, ended_at=H + timedelta(minutes=1))
    (seg,) = phase_segments(s, H, LATER)
    tel = WorkloadTelemetry(active={step(0): Decimal("3"), step(5): Decimal("1.5")})
    result = meter_running(s, seg, tel)
    assert result.active_gpu_hours == Decimal("0.0333")
    orphans = orphan_minutes({7: tel}, {7: set(result.used_steps)})
    assert orphans == {7: (1, Decimal("0.0250"), "")}


def test_mig_slices_are_gpu_hours_by_their_gpu_equivalents():
    # Three 1g slices (1/7 each) and nothing else, running a full hour: 3/7 GPU-hour.
    s = span(gpus=0, gpu_equivalents=Decimal(3) / 7, reserved_at=H, running_at=H,
             ended_at=H + timedelta(hours=1))
    (seg,) = phase_segments(s, H, LATER)
    assert segment_quantities(s, seg).gpu_hours == Decimal("0.4286")
