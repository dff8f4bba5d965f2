"""core.quantity: exact base units per resource, any Kubernetes quantity, shortest exact
quantities back, resource names, GPU-equivalents (QUOTA-SEMANTICS.md §10)."""

from decimal import Decimal

import pytest

from core.quantity import (
    QuantityError,
    amount_to_base,
    base_to_amount,
    card_equivalent,
    display,
    format_base,
    read_amount,
    resource_name_problem,
    to_amount,
    to_base,
    unit,
)


@pytest.mark.parametrize(("resource", "text", "base"), [
    ("memory", "4G", 4_000_000_000),
    ("memory", "2048Gi", 2048 * 2**30),
    ("memory", "100Mi", 100 * 2**20),
    ("memory", "1.5Gi", 3 * 2**29),
    ("gpu.memory", "800Gi", 800 * 2**30),
    ("ephemeral-storage", "100G", 10**11),
    ("hugepages-2Mi", "4Mi", 4 * 2**20),
    ("cpu", "500m", 500),
    ("cpu", "1e3", 1_000_000),
    ("gpu", 8, 8000),
    ("nvidia.com/mig-1g.10gb", "7", 7000),
    ("nvidia.com/total-gpumem", 20480, 20_480_000),
    ("cpu_credits", 14, 14_000),
])
def test_every_quantity_is_an_exact_integer_of_the_base_unit(resource, text, base):
    assert to_base(resource, text) == base
    assert amount_to_base(resource, to_amount(resource, text)) == base


@pytest.mark.parametrize(("resource", "text"), [
    ("memory", "4G"), ("memory", "2048Gi"), ("memory", "100Mi"), ("memory", "1000Mi"),
    ("gpu.memory", "800Gi"), ("cpu", "500m"), ("cpu", "96"), ("nvidia.com/mig-1g.10gb", "7"),
    ("example.com/foo", "250m"), ("memory", "512Mi"), ("memory", "1G"),
])
def test_quantities_come_back_as_written(resource, text):
    assert format_base(resource, to_base(resource, text)) == text


def test_exact_amounts_in_allot_units():
    assert to_amount("memory", "4G") == Decimal("3.7252902984619140625")
    assert base_to_amount("memory", 2**30) == 1
    assert to_amount("cpu", "500m") == Decimal("0.5")
    assert unit("memory") == "GiB" and unit("cpu") == "cores" and unit("gpu") == "GPUs"
    assert unit("nvidia.com/mig-1g.10gb") == "" and unit("gpu.memory") == "GiB"
    assert display("memory", Decimal("3.7252902984619140625")) == "3.72529 GiB"
    assert display("nvidia.com/mig-1g.10gb", 7) == "7"


@pytest.mark.parametrize(("resource", "value", "message"), [
    ("memory", "0.5", "0.5 is not a whole number of bytes"),
    ("cpu", "10u", "10u has more than 3 decimal places"),
    ("cpu", "-1", "-1 is negative"),
    ("gpu", "1.5", "1.5: GPUs are whole cards"),
    ("memory", "9Ei", "9Ei is too large (below 4294967296 GiB)"),
    ("cpu", "1e12", "1e12 is too large (below 100000000000 cores)"),
    ("cpu", "ten", "'ten' is not a Kubernetes quantity (like 64, 500m, 2048Gi)"),
    ("cpu", True, "True is not a quantity"),
])
def test_what_cannot_be_kept_exactly_is_refused_by_name(resource, value, message):
    with pytest.raises(QuantityError) as exc:
        to_base(resource, value)
    assert str(exc.value) == message


def test_a_plain_number_is_in_allot_units_a_suffix_is_a_quantity():
    assert read_amount("memory", "1.5") == Decimal("1.5")  # GiB
    assert read_amount("memory", 1536) == 1536
    assert read_amount("memory", "4G") == Decimal("3.7252902984619140625")
    assert read_amount("cpu", "500m") == Decimal("0.5")
    with pytest.raises(QuantityError, match="0.1 is not a whole number of bytes"):
        read_amount("memory", 0.1)


def test_resource_names():
    for name in ("cpu", "cpu_credits", "gpu.memory", "nvidia.com/mig-1g.10gb",
                 "example.com/gpu", "hugepages-2Mi"):
        assert resource_name_problem(name) is None, name
    for name in ("bad name", "a/b/c", "", "x" * 64, "-cpu"):
        assert resource_name_problem(name) is not None, name


def test_card_equivalents():
    assert card_equivalent("nvidia.com/mig-3g.40gb") == Decimal(3) / 7
    assert card_equivalent("nvidia.com/mig-3g.40gb", {"nvidia.com/mig-3g.40gb": 0.5}) == \
        Decimal("0.5")
    assert card_equivalent("example.com/foo") == 0
    assert card_equivalent("gpu") == 1
