"""scheduling.backends.simulated.admin: simulated Jobs in the Django admin."""

import pytest
from django.urls import reverse

from scheduling.backends.simulated.backend import SimulatedBackend
from tests.integration.backends.simulated.helpers import make_spec

pytestmark = pytest.mark.django_db


def test_admin_lists_simulated_jobs_with_their_pods_now(cluster, client):
    from tests.factories import AdminFactory

    backend = SimulatedBackend(name=cluster.name)
    backend.start_workload(backend.create_workload(make_spec(duration_s=None)))
    client.force_login(AdminFactory())
    response = client.get(reverse("admin:simulated_simjob_changelist"))
    assert response.status_code == 200
    assert "allot-w7-0" in response.content.decode()
    assert "0 pending, 2 running, 0 succeeded" in response.content.decode()
