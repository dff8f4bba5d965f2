"""scheduling.backends.simulated.views: the DCGM endpoint serves simulated clusters only."""

import pytest
from django.urls import reverse

from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def test_metrics_of_unknown_or_kubernetes_clusters_are_404(client, cluster):
    ClusterFactory(name="k8s-bj", backend="kubernetes")
    assert client.get(reverse("sim-dcgm-metrics", args=["k8s-bj"])).status_code == 404
    assert client.get(reverse("sim-dcgm-metrics", args=["nope"])).status_code == 404
