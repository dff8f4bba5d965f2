"""scheduling.backends.simulated.cluster: the cluster's row and the nodes declared for it."""

from decimal import Decimal

import pytest

from scheduling.backends.simulated.backend import SimulatedBackend
from tests.integration.backends.simulated.helpers import make_spec

pytestmark = pytest.mark.django_db


def test_nodes_are_the_clusters_node_rows(backend):
    nodes = backend.list_nodes()
    assert [(n.name, n.flavor, n.gpus, n.rack, n.ready) for n in nodes] == [
        ("sim-bj-a100-80g-0", "a100-80g", 8, "r1", True),
        ("sim-bj-a100-80g-1", "a100-80g", 8, "r2", True),
    ]
    assert nodes[0].memory_gib == Decimal("512.000")


def test_a_cluster_missing_from_the_database_is_a_clear_error():
    from scheduling.backends import BackendError

    backend = SimulatedBackend(name="gone")
    with pytest.raises(BackendError, match="simulated cluster gone does not exist") as error:
        backend.create_workload(make_spec())
    assert not error.value.retryable
