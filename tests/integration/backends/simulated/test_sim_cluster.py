"""`manage.py sim_cluster`: a simulated cluster steered at run time."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduling.backends import DispatchRefused, RunPhase
from scheduling.backends.simulated.backend import SimulatedBackend
from tests.integration.backends.simulated.helpers import NS, make_spec

pytestmark = pytest.mark.django_db


def test_management_command_refuses_and_accepts(cluster, backend):
    out = StringIO()
    call_command("sim_cluster", "sim-bj", "--refuse", stdout=out)
    assert "sim-bj: refuse=yes refuse_next=0 fail_next=0" in out.getvalue()
    with pytest.raises(DispatchRefused):
        backend.create_workload(make_spec())
    call_command("sim_cluster", "sim-bj", "--accept", stdout=StringIO())
    backend.create_workload(make_spec())
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("sim_cluster", "nope", "--refuse")


def test_fail_job_now_from_the_command(cluster):
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(duration_s=None))
    backend.start_workload(ref)
    out = StringIO()
    call_command("sim_cluster", "sim-bj", "--fail-job", "allot-w7-0", stdout=out)
    assert "allot-w7-0: fails now" in out.getvalue()
    assert f"{NS}/allot-w7-0: 2 pods, failed" in out.getvalue()
    assert backend.workload_status(ref).phase is RunPhase.FAILED
    with pytest.raises(CommandError, match="no Job named allot-w1-0"):
        call_command("sim_cluster", "sim-bj", "--fail-job", "allot-w1-0")
