"""The Kubernetes API double the backends' tests talk to (`kube`): five nodes of two flavors,
one of them not ready and one cordoned."""

import pytest

from tests.integration.backends.k8s.specs import A100, H100
from tests.k8s_double import KubeDouble


@pytest.fixture
def kube():
    with KubeDouble() as double:
        double.state.add_node(
            "bj-a100-0",
            labels={**A100.node_selector, "allot.io/nvlink-domain": "rack-1",
                    "topology.kubernetes.io/zone": "bj-1a"},
            gpus=8, cpu="95500m", memory="1056763364Ki",
        )
        double.state.add_node("bj-a100-1", labels=dict(A100.node_selector), gpus=8)
        double.state.add_node(
            "bj-h100-0",
            labels={**H100.node_selector, "topology.kubernetes.io/zone": "bj-1b"},
            gpus=8, ready=False,
        )
        double.state.add_node("bj-cpu-0", labels={"node-role": "cpu"}, gpus=0, cpu="64",
                              memory="256Gi")
        double.state.add_node("bj-a100-2", labels=dict(A100.node_selector), unschedulable=True)
        yield double
