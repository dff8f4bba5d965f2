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


SLICE = "nvidia.com/mig-1g.10gb"


def shaped(phase="running", *, gpus="0", fraction="0", slices=None, active=None, gap="0"):
    slices = slices or {}
    return UsageInput(
        phase=phase, start=H, end=H + timedelta(minutes=60), gpus=Decimal(gpus),
        cpu=Decimal(0), memory_gib=Decimal(0),
        active_gpu_hours=None if active is None else Decimal(active), gap_gpu_hours=Decimal(gap),
        gpu_equivalents=sum((c for _, c in slices.values()), Decimal(0)),
        fraction_gpus=Decimal(fraction), slices=slices,
    )


def test_a_mig_profile_rate_prices_its_slices_per_slice_hour_the_rest_per_gpu_equivalent():
    """7 slices of 1g (one card) and one whole card: the profile's 0.50/slice-hour replaces
    its GPU-equivalent at 3.00 (3.50 instead of 3.00); the whole card stays at 3.00."""
    rates = {"gpu": [rv(1, 1, H - timedelta(days=1), "3.00")],
             SLICE: [rv(2, 1, H - timedelta(days=1), "0.50", resource=SLICE,
                        unit="slice-hour")]}
    lines = price_usage(shaped(gpus="1", slices={SLICE: (Decimal(7), Decimal("1.000000"))}),
                        rates, basis="allocation", usage_share=Decimal(0))
    assert [(ln.rate_card_id, ln.quantity, ln.unit, ln.amount) for ln in lines] == [
        (1, Decimal("1.0000"), "GPU-hour", Decimal("3.00")),
        (2, Decimal("7.0000"), "slice-hour", Decimal("3.50")),
    ]
    # Without the override the slices are one more card at the GPU rate.
    (line,) = price_usage(shaped(gpus="1", slices={SLICE: (Decimal(7), Decimal("1.000000"))}),
                          {"gpu": rates["gpu"]}, basis="allocation", usage_share=Decimal(0))
    assert (line.quantity, line.amount) == (Decimal("2.0000"), Decimal("6.00"))


def test_a_fraction_rate_prices_the_shares_and_usage_splits_activity_by_cards():
    """Half a card as fractions under `gpu-fraction` (4.00) and one whole card at 3.00, on the
    usage basis: the 0.9 active GPU-hours split 2:1 between the whole card and the shares."""
    rates = {"gpu": [rv(1, 1, H - timedelta(days=1), "3.00")],
             "gpu-fraction": [rv(2, 1, H - timedelta(days=1), "4.00",
                                 resource="gpu-fraction")]}
    lines = price_usage(shaped(gpus="1.5", fraction="0.5", active="0.9"), rates,
                        basis="usage", usage_share=Decimal(1))
    assert [(ln.kind, ln.rate_card_id, ln.quantity, ln.amount) for ln in lines] == [
        ("gpu_active", 1, Decimal("0.6000"), Decimal("1.80")),
        ("gpu_active", 2, Decimal("0.3000"), Decimal("1.20")),
    ]


def test_before_an_overrides_first_version_its_part_falls_back_to_the_gpu_rate():
    """The slice rate starts at :30: the first half hour of the 7 slices is one card at the
    GPU rate (1.50), the second 7 x 0.5 slice-hours at 0.50 (1.75)."""
    rates = {"gpu": [rv(1, 1, H - timedelta(days=1), "3.00", frozen="1.00")],
             SLICE: [rv(2, 1, H + timedelta(minutes=30), "0.50", frozen="0.10",
                        resource=SLICE, unit="slice-hour")]}
    lines = price_usage(shaped(slices={SLICE: (Decimal(7), Decimal("1.000000"))}), rates,
                        basis="allocation", usage_share=Decimal(0))
    assert [(ln.rate_card_id, ln.quantity, ln.amount) for ln in lines] == [
        (1, Decimal("0.5000"), Decimal("1.50")), (2, Decimal("3.5000"), Decimal("1.75"))]
    frozen = price_usage(shaped("frozen", slices={SLICE: (Decimal(7), Decimal("1.000000"))}),
                         rates, basis="allocation", usage_share=Decimal(0))
    assert [(ln.kind, ln.rate, ln.amount) for ln in frozen] == [
        ("gpu_frozen", Decimal("1.00"), Decimal("0.50")),
        ("gpu_frozen", Decimal("0.10"), Decimal("0.35"))]
