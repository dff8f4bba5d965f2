"""scheduling.backends.simulated.refusals: what a simulated cluster refuses."""

import pytest

from scheduling.backends import DispatchRefused, RefusalReason
from scheduling.backends.simulated.models import SimControl, SimJob
from scheduling.backends.simulated.services import sim_control_set
from tests.integration.backends.simulated.helpers import NS, make_spec, set_connection

pytestmark = pytest.mark.django_db


def test_connection_refuse_refuses_every_dispatch(cluster, backend):
    set_connection(cluster, refuse=True)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.REFUSED
    assert refused.value.message == "simulated cluster sim-bj refuses dispatches"
    assert not SimJob.objects.exists()


def test_refuse_next_counts_down_then_accepts(cluster, backend):
    sim_control_set(cluster_name="sim-bj", refuse_next=2)
    for left in (1, 0):
        with pytest.raises(DispatchRefused, match=f"{left} more to refuse"):
            backend.create_workload(make_spec())
    backend.create_workload(make_spec())
    assert SimControl.objects.get(cluster=cluster).refuse_next == 0


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("delete", "node sim-bj-a100-80g-1 no longer exists on simulated cluster sim-bj"),
        ("not-ready", "node sim-bj-a100-80g-1 on simulated cluster sim-bj is not ready"),
    ],
)
def test_assigned_node_gone_is_a_refusal(cluster, backend, change, words):
    node = cluster.nodes.get(name="sim-bj-a100-80g-1")
    if change == "delete":
        node.delete()
    else:
        node.ready = False
        node.save()
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(nodes=["sim-bj-a100-80g-0", "sim-bj-a100-80g-1"]))
    assert refused.value.reason is RefusalReason.NODE_GONE
    assert refused.value.message == words


def test_forbidden_namespace(cluster, backend):
    set_connection(cluster, forbidden_namespaces=[NS])
    with pytest.raises(DispatchRefused) as refused:
        backend.ensure_namespace(NS)
    assert refused.value.reason is RefusalReason.NAMESPACE_FORBIDDEN
    with pytest.raises(DispatchRefused, match=f'namespace "{NS}" forbidden'):
        backend.create_workload(make_spec())
    backend.ensure_namespace("rd-nlp")
