"""scheduling.backends.simulated.services: the writes that steer a simulated cluster."""

import pytest

from scheduling.backends.simulated.services import SimClusterError, sim_control_set
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def test_control_of_a_kubernetes_cluster_is_refused():
    ClusterFactory(name="k8s-bj", backend="kubernetes")
    with pytest.raises(SimClusterError, match="uses the kubernetes backend"):
        sim_control_set(cluster_name="k8s-bj", refuse=True)
    with pytest.raises(SimClusterError, match="fail_next must be 0 or more"):
        sim_control_set(cluster_name="k8s-bj", fail_next=-1)
