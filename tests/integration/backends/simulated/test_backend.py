"""scheduling.backends.simulated.backend: SimulatedBackend, its state in the database."""

import pytest

from scheduling.backends import RunPhase, clear_backend_cache, get_backend
from scheduling.backends.simulated.backend import SimulatedBackend
from tests.integration.backends.simulated.helpers import make_spec

pytestmark = pytest.mark.django_db


def test_get_backend_picks_the_simulated_backend_and_state_is_in_the_database(cluster, clock):
    clear_backend_cache()
    backend = get_backend(cluster)
    assert isinstance(backend, SimulatedBackend)
    ref = backend.create_workload(make_spec())
    # Another process (another backend object) sees the same cluster.
    other = SimulatedBackend(name=cluster.name, clock=clock)
    assert other.workload_status(ref).phase is RunPhase.SUSPENDED
    clear_backend_cache()
