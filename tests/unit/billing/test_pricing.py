"""Pricing: bases, frozen rate, a rate change mid-hour, time before the first rate."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing.pricing import RateVersion, UsageInput, price_usage

H = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def rv(id, version, start, rate, frozen=None, resource="gpu", unit="GPU-hour"):
    return RateVersion(
        id=id, resource=resource, version=version, effective_from=start, rate=Decimal(rate),
        frozen_rate=Decimal(frozen if frozen is not None else rate), unit=unit, currency="EUR",
    )


def usage(phase="running", minutes=60, gpus=8, active=None, gap="0", cpu="0", start=H):
    return UsageInput(
        phase=phase, start=start, end=start + timedelta(minutes=minutes), gpus=gpus,
        cpu=Decimal(cpu), memory_gib=Decimal(0),
        active_gpu_hours=None if active is None else Decimal(active), gap_gpu_hours=Decimal(gap),
    )


def test_frozen_part_priced_at_its_own_rate_on_its_own_line():
    rates = {"gpu": [rv(1, 1, H - timedelta(days=1), "2.50", frozen="1.00")]}
    (line,) = price_usage(usage(phase="frozen", minutes=5, gpus=16), rates,
                          basis="allocation", usage_share=Decimal("0.5"))
    assert (line.kind, line.quantity, line.rate, line.amount) == (
        "gpu_frozen", Decimal("1.3333"), Decimal("1.00"), Decimal("1.33"),
    )


def test_rate_change_mid_hour_prices_each_part_at_its_version():
    rates = {"gpu": [rv(1, 1, H - timedelta(days=1), "2.00"),
                     rv(2, 2, H + timedelta(minutes=20), "3.00")]}
    lines = price_usage(usage(gpus=8), rates, basis="allocation", usage_share=Decimal(0))
    assert [(ln.rate_version, ln.quantity, ln.amount) for ln in lines] == [
        (1, Decimal("2.6667"), Decimal("5.33")),   # 8 GPUs x 20 min x 2.00
        (2, Decimal("5.3333"), Decimal("16.00")),  # 8 GPUs x 40 min x 3.00
    ]


def test_usage_basis_bills_active_plus_gaps_and_hybrid_shares():
    rates = {"gpu": [rv(1, 1, H - timedelta(days=1), "2.00")]}
    u = usage(gpus=8, active="3.0000", gap="1.0000")
    (line,) = price_usage(u, rates, basis="usage", usage_share=Decimal(0))
    assert (line.kind, line.quantity, line.amount) == ("gpu_active", Decimal("4.0000"),
                                                       Decimal("8.00"))
    hybrid = price_usage(u, rates, basis="hybrid", usage_share=Decimal("0.25"))
    assert [(ln.kind, ln.quantity, ln.amount) for ln in hybrid] == [
        ("gpu_reserved", Decimal("6.0000"), Decimal("12.00")),  # 75% of 8 reserved
        ("gpu_active", Decimal("1.0000"), Decimal("2.00")),    # 25% of 4 metered
    ]


def test_cpu_only_pods_charge_core_hours_and_time_before_first_rate_is_unpriced():
    rates = {"cpu": [rv(5, 1, H + timedelta(minutes=30), "0.05", resource="cpu",
                        unit="core-hour")]}
    (line,) = price_usage(usage(gpus=0, cpu="6"), rates, basis="allocation",
                          usage_share=Decimal(0))
    assert (line.kind, line.quantity, line.unit, line.amount) == (
        "cpu", Decimal("3.0000"), "core-hour", Decimal("0.15"),
    )
