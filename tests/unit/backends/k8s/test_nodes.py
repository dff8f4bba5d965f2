"""scheduling.backends.k8s.nodes: what a node reports, read into a NodeInfo.

Allocatable quantities are read with core.quantity's parser; on every form a node reports (the
API server writes them in canonical form) it gives the very Decimal the Kubernetes client's
parser gives.
"""

from decimal import Decimal
from types import SimpleNamespace

import pytest
from kubernetes.utils.quantity import parse_quantity as client_parse_quantity

from core.quantity import parse_quantity
from scheduling.backends.base import FlavorMatch
from scheduling.backends.k8s.nodes import NodesMixin

# cpu, memory and nvidia.com/gpu as real nodes report them (allocatable).
NODE_QUANTITIES = [
    "250m", "64", "512Gi", "1Ti", "8", "1.5", "0", "95500m", "7910m", "191",
    "1056763364Ki", "263921212Ki", "2113526960Ki", "256Gi", "1024Gi",
]
A100 = FlavorMatch(name="a100-80g", node_selector={"nvidia.com/gpu.product": "A100"})


def node(allocatable, *, labels=None):
    return SimpleNamespace(
        metadata=SimpleNamespace(name="n-0", labels=labels or {}),
        spec=SimpleNamespace(unschedulable=None),
        status=SimpleNamespace(
            allocatable=allocatable,
            conditions=[SimpleNamespace(type="Ready", status="True")],
        ),
    )


@pytest.mark.parametrize("text", NODE_QUANTITIES)
def test_node_quantities_parse_as_the_kubernetes_client_parses_them(text):
    ours, client = parse_quantity(text), client_parse_quantity(text)
    assert ours == client
    assert str(ours) == str(client)  # the same exponent too, so the same after quantize


@pytest.mark.parametrize(
    ("allocatable", "gpus", "cpu", "memory_gib"),
    [
        ({"nvidia.com/gpu": "8", "cpu": "95500m", "memory": "1056763364Ki"},
         8, "95.500", "1007.808"),
        ({"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}, 8, "64.000", "512.000"),
        ({"nvidia.com/gpu": "0", "cpu": "250m", "memory": "1Ti"}, 0, "0.250", "1024.000"),
        ({"cpu": "1.5", "memory": "263921212Ki"}, 0, "1.500", "251.695"),
        ({}, 0, "0.000", "0.000"),
    ],
)
def test_node_info_reads_allocatable_gpus_cpu_and_memory(allocatable, gpus, cpu, memory_gib):
    info = NodesMixin._node_info(node(allocatable, labels=dict(A100.node_selector)), [A100])
    assert (info.gpus, info.cpu, info.memory_gib) == (gpus, Decimal(cpu), Decimal(memory_gib))
    assert str(info.cpu) == cpu and str(info.memory_gib) == memory_gib
    assert info.flavor == "a100-80g" and info.ready


def test_shared_cards_are_counted_once():
    import json

    from scheduling.backends.k8s.nodes import physical_cards

    # HAMi advertises 10 vGPUs per card; its registration lists the two cards.
    register = json.dumps([{"id": "GPU-a", "index": 0}, {"id": "GPU-b", "index": 1}])
    assert physical_cards({}, {"hami.io/node-nvidia-register": register}, 20) == 2
    # Time-slicing: 4 replicas of each of 2 cards, as GPU feature discovery labels them.
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "2"}
    assert physical_cards(labels, None, 8) == 2
    # Nothing shared: the allocatable count.
    assert physical_cards({"nvidia.com/gpu.count": "8"}, {}, 8) == 8
    assert physical_cards({"nvidia.com/gpu.replicas": "x"}, None, 8) == 8


def test_node_info_reads_every_extended_resource_exactly():
    info = NodesMixin._node_info(node({
        "nvidia.com/gpu": "0", "cpu": "64", "memory": "512Gi", "pods": "110",
        "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "0",
        "ephemeral-storage": "100G", "hugepages-2Mi": "0", "example.com/foo": "500m",
    }, labels=dict(A100.node_selector)), [A100])
    # Integers of the base unit: thousandths of a count, bytes for storage; zero is left out.
    assert info.resources == {"nvidia.com/mig-1g.10gb": 7000, "ephemeral-storage": 10**11,
                              "example.com/foo": 500}
