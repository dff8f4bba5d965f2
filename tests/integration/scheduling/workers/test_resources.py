"""Extended resources end to end (QUOTA-SEMANTICS.md §10): a node's MIG slices from the
database, a pod asking for them, the quota on the key, and a rejection naming a resource no
node advertises."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from quotas.models import Flavor, Queue, QuotaEntry
from quotas.services import quota_set
from scheduling.fleet.dispatch import DISPATCH_FIELDS, POD_SET_FIELDS, _spec_of
from scheduling.models import Admission, Node, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import request

S = WorkloadState
MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def mig_world(world_dispatch_after_commit):
    world = world_dispatch_after_commit
    mig = Flavor.objects.create(name="a100-mig", gpu_memory_gib=80,
                                node_selector={"allot.io/flavor": "a100-mig"})
    Node.objects.create(cluster=world.bj, name="bj-mig-0", flavor=mig, gpus=0,
                        cpu=Decimal(64), memory_gib=Decimal(512), resources={MIG: 7000})
    quota_set(queue=Queue.objects.get(path="rd"), flavor="a100-mig", resource=MIG, min=4, max=7)
    quota_set(queue=Queue.objects.get(path="rd/vision"), flavor="a100-mig", resource=MIG,
              min="2", max=4)
    assert QuotaEntry.objects.get(queue__path="rd/vision", resource=MIG).max_base == 4000
    return world


def mig_request(name: str, slices: object, count: int = 1, resource: str = MIG) -> dict:
    body = request(name)
    body["pods"] = [{"count": count, "flavors": ["a100-mig"], "cpu": "500m", "memory_gib": 16,
                     "resources": {resource: slices}}]
    return body


def test_pods_get_slices_within_the_quota(mig_world):
    a = workload_submit(user=mig_world.alice, data=mig_request("a", 1, count=3))
    assert cycle_run(wait=True).admitted == [a.pk]
    b = workload_submit(user=mig_world.alice, data=mig_request("b", "2"))
    assert cycle_run(wait=True).admitted == []
    b.refresh_from_db()
    assert b.state == S.PENDING
    assert b.reason_code == "QUOTA_MAX"
    assert b.reason_message == f"queue rd/vision a100-mig/{MIG}: used 3 + requested 2 > max 4"
    adm = a.admissions.get()
    assert adm.nodes == ["bj-mig-0"] * 3
    pod_set = a.pod_sets.get()
    assert pod_set.resources == {MIG: 1000}
    row = Admission.objects.filter(workload=a).values(*DISPATCH_FIELDS).get()
    sets = list(a.pod_sets.values(*POD_SET_FIELDS))
    spec = _spec_of(row, sets)
    assert spec.pod_sets[0].resources == {MIG: 1000}


def test_unadvertised_resource_is_rejected_naming_it(mig_world):
    w = workload_submit(user=mig_world.alice,
                        data=mig_request("c", 1, resource="nvidia.com/mig-3g.40gb"))
    assert w.state == S.REJECTED
    assert w.reason_code == "FLAVOR_UNAVAILABLE"
    assert "nvidia.com/mig-3g.40gb" in w.reason_message


@pytest.mark.parametrize(("resources", "field", "message"), [
    ({MIG: "lots"}, f"pods[0].resources[{MIG}]", "'lots' is not a Kubernetes quantity"),
    ({MIG: "0.0001"}, f"pods[0].resources[{MIG}]", "0.0001 has more than 3 decimal places"),
    ({MIG: -1}, f"pods[0].resources[{MIG}]", "-1 is negative"),
    ({"bad name": 1}, "pods[0].resources", "'bad name' is not a Kubernetes resource name"),
    ({"cpu": 1}, "pods[0].resources", "cpu: has a field of its own"),
])
def test_bad_resources_are_refused_naming_the_field(mig_world, resources, field, message):
    body = mig_request("d", 1)
    body["pods"][0]["resources"] = resources
    with pytest.raises(ValidationError) as exc:
        workload_submit(user=mig_world.alice, data=body)
    errors = exc.value.message_dict
    assert any(message in m for m in errors[field]), errors


def test_a_nomination_keeps_its_victims_extended_resources_through_json() -> None:
    import json

    from scheduling import engine
    from scheduling.workers.snapshot import nomination_from_json, nomination_json

    nom = engine.Nomination(flavor="a100-mig", at=5.0, victims=(engine.NominatedVictim(
        name="7", queue="ml/a", cluster="bj", nodes=("bj-mig-0", "bj-mig-0", "bj-0"),
        pods=((0.5, 1.0, 4.0, -1.0, 2, ((MIG, 1.0),)), (0, 2.0, 8.0, 0.0, -1, ((MIG, 3.0),)),
              (4, 8.0, 64.0))),))
    again = nomination_from_json(json.loads(json.dumps(nomination_json(nom))))
    assert again == nom
