"""scheduling.backends.k8s.nodes: the node inventory; the check of the nodes a dispatch names."""

from decimal import Decimal

import pytest

from scheduling.backends import DispatchRefused, FlavorMatch, PodSetSpec, RefusalReason
from tests.integration.backends.k8s.specs import A100, FLAVORS, make_spec


def test_node_inventory_reads_flavor_resources_readiness_and_rack(backend):
    nodes = {n.name: n for n in backend.list_nodes(FLAVORS)}
    assert set(nodes) == {"bj-a100-0", "bj-a100-1", "bj-a100-2", "bj-h100-0", "bj-cpu-0"}
    first = nodes["bj-a100-0"]
    assert first.flavor == "a100-80g"
    assert first.gpus == 8
    assert first.cpu == Decimal("95.500")
    assert first.memory_gib == Decimal("1007.808")  # 1056763364 KiB
    assert first.ready is True
    assert first.rack == "rack-1"  # the flavor's interconnect label wins over the zone
    assert first.labels["kubernetes.io/hostname"] == "bj-a100-0"
    assert nodes["bj-a100-1"].rack == ""
    assert nodes["bj-h100-0"].flavor == "h100"
    assert nodes["bj-h100-0"].ready is False  # Ready condition False
    assert nodes["bj-h100-0"].rack == "bj-1b"  # no interconnect label: the zone
    assert nodes["bj-a100-2"].ready is False  # cordoned
    assert nodes["bj-cpu-0"].flavor is None
    assert nodes["bj-cpu-0"].gpus == 0 and nodes["bj-cpu-0"].memory_gib == Decimal("256.000")


def test_most_specific_flavor_selector_wins(kube, backend):
    kube.state.add_node("bj-a100-mig", labels={**A100.node_selector, "nvidia.com/mig": "on"})
    mig = FlavorMatch(name="a100-mig", node_selector={**A100.node_selector,
                                                      "nvidia.com/mig": "on"})
    nodes = {n.name: n.flavor for n in backend.list_nodes([*FLAVORS, mig])}
    assert nodes["bj-a100-mig"] == "a100-mig"
    assert nodes["bj-a100-0"] == "a100-80g"


@pytest.mark.parametrize(
    ("node", "change", "words"),
    [
        ("bj-a100-1", "delete", "node bj-a100-1 no longer exists on cluster bj"),
        ("bj-a100-1", "not-ready", "node bj-a100-1 on cluster bj is not ready"),
    ],
)
def test_assigned_node_gone_is_a_refusal(kube, backend, node, change, words):
    if change == "delete":
        del kube.state.nodes[node]
    else:
        kube.state.set_node_ready(node, False)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.NODE_GONE
    assert words in refused.value.message
    assert kube.state.jobs == {}


def test_a_big_gang_checks_its_nodes_with_one_list_call(kube, backend):
    for i in range(3, 8):
        kube.state.add_node(f"bj-a100-{i}", labels=dict(A100.node_selector))
    nodes = ("bj-a100-0", "bj-a100-1", "bj-a100-3", "bj-a100-4", "bj-a100-5")
    pod_set = PodSetSpec(index=0, count=5, flavor="a100-80g", gpus=8, cpu=Decimal(8),
                         memory_gib=Decimal(64), node_selector=dict(A100.node_selector),
                         nodes=nodes)
    backend.create_workload(make_spec(pod_sets=(pod_set,)))
    assert len(kube.requests("GET", r"/api/v1/nodes$")) == 1
    assert not kube.requests("GET", r"/api/v1/nodes/")
    kube.state.set_node_ready("bj-a100-4", False)
    with pytest.raises(DispatchRefused, match="node bj-a100-4 on cluster bj is not ready"):
        backend.create_workload(make_spec(workload_id=8, pod_sets=(pod_set,)))
