"""A simulated cluster of two 8-GPU nodes (speedup 10) and its backend on a clock moved by hand."""

import pytest

from scheduling.backends.simulated.backend import SimulatedBackend
from tests.factories import ClusterFactory, FlavorFactory, NodeFactory
from tests.integration.backends.simulated.helpers import Clock


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def cluster():
    cluster = ClusterFactory(name="sim-bj", backend="simulated", connection={"speedup": 10})
    flavor = FlavorFactory(name="a100-80g", gpu_memory_gib=80)
    NodeFactory(cluster=cluster, name="sim-bj-a100-80g-0", flavor=flavor, gpus=8, rack="r1")
    NodeFactory(cluster=cluster, name="sim-bj-a100-80g-1", flavor=flavor, gpus=8, rack="r2")
    return cluster


@pytest.fixture
def backend(cluster, clock):
    return SimulatedBackend(name=cluster.name, clock=clock)
